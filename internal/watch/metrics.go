package watch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "watch"

// Reasons a subscriber is cut, the reason label of subscribers_cut_total.
const (
	cutSlow      = "slow"
	cutTruncated = "truncated"
	cutShutdown  = "shutdown"
)

var (
	watchersGauge = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "watchers",
		Help: "Subscribers of the watch hub, catching up or live, by database.",
	}, []string{"db"}))
	prefixesGauge = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "prefixes",
		Help: "Distinct prefixes of live watchers, by database: each change is filtered, buffered and encoded once per prefix.",
	}, []string{"db"}))
	refusedTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "refused_total",
		Help: "Watches refused because the process already serves its maximum (watch_max_watchers).",
	}))
	writesTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "writes_total",
		Help: "Writes to watch streams (changes, progress lines); events_sent_total / writes_total is how many changes a write carries.",
	}))
	turnWaitSeconds = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "turn_wait_seconds",
		Help:    "Time a watch stream waited for its write turn (the write budget: watch_write_rate, watch_write_concurrency) before a write; it grows while a storm is spread out.",
		Buckets: metrics.LatencyBuckets,
	}))
	turnWaiting = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "turn_waiting",
		Help: "Watch streams waiting for a write turn now.",
	}))
	turnLeaseExpiredTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "turn_lease_expired_total",
		Help: "Writes to a watch stream that outlasted their turn (2ms): a client not reading, or a descheduled thread.",
	}))
	eventsSentTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "events_sent_total",
		Help: "Changes (one per key set or deleted) written to watchers.",
	}))
	subscribersCutTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "subscribers_cut_total",
		Help: "Watchers ended by the server, by reason: slow (fell behind its prefix's buffer), truncated (the hub fell behind the retained log), shutdown.",
	}, []string{"reason"}))
	deliveryDelaySeconds = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "delivery_delay_seconds",
		Help:    "Time from an entry's commit (its root timestamp) to its changes being written to a watcher, per entry and watcher.",
		Buckets: metrics.LatencyBuckets,
	}))
	hubLagEntries = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "hub_lag_entries",
		Help: "Applied entries the watch hub has not fanned out yet, by database.",
	}, []string{"db"}))
	hubReadEntriesTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "hub_read_entries_total",
		Help: "Log entries the watch hub read back from the store and fanned out to live watchers, by database.",
	}, []string{"db"}))
	hubSkippedEntriesTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "hub_skipped_entries_total",
		Help: "Log entries the watch hub passed without reading them because no watcher was live, by database (watchers arriving later read the log themselves).",
	}, []string{"db"}))
)

func init() {
	for _, r := range []string{cutSlow, cutTruncated, cutShutdown} {
		subscribersCutTotal.WithLabelValues(r)
	}
}

// Metrics of the adaptive write budget (Budget.Run).
var (
	writeRateGauge = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "write_rate",
		Help: "Write turns per second the watch budget allows now: adapted between write_rate_floor and watch_write_rate to what delivery costs readers.",
	}))
	writeRateFloorGauge = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "write_rate_floor",
		Help: "Lowest write rate the watch budget may set now: a turn every 2 s per watcher, at least 100/s.",
	}))
	wakeDelaySeconds = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "wake_delay_seconds",
		Help:    "How late a goroutine woken by the network ran (the watch budget's probe, every 2ms while there are watchers): what a reader's request waits before it is served.",
		Buckets: metrics.LatencyBuckets,
	}))
	wakeDelaySignalSeconds = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "wake_delay_signal_seconds",
		Help: "The watch budget's signal in the last 100ms window: the 90th percentile of wake_delay_seconds; over watch_wake_delay_target (1ms), or over 2x wake_delay_baseline_seconds (at least +200µs), the write rate is cut.",
	}))
	wakeDelayBaselineSeconds = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "wake_delay_baseline_seconds",
		Help: "The same percentile while no watcher writes, measured by holding every write turn for 20ms about once a second: the signal may exceed it by 2x (at least 200µs) before the write rate is cut.",
	}))
	rateDecisionsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "rate_decisions_total",
		Help: "Decisions of the watch budget, one per 100ms window with watchers: raise, cut, hold, gc_forgiven (over target in a window where a GC cycle started or ended: forgiven, up to 2 in a row), no_signal (no probe came back).",
	}, []string{"decision"}))
)

func init() {
	for _, d := range decisions {
		rateDecisionsTotal.WithLabelValues(string(d))
	}
}
