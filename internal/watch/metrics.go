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

// Metrics are the collectors of a process's watch hubs and their write
// budget. The owner registers it once (it is a prometheus.Collector) and
// gives it to the Budget (NewBudget) and, through Config.Metrics or the
// budget, to every Hub: the series per database carry the label db, the
// others count for every hub sharing it. A hub or budget given none
// counts in one of its own, registered nowhere, which a test reads.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	watchers   *prometheus.GaugeVec
	prefixes   *prometheus.GaugeVec
	hubLag     *prometheus.GaugeVec
	hubRead    *prometheus.CounterVec
	hubSkipped *prometheus.CounterVec

	refused          prometheus.Counter
	writes           prometheus.Counter
	turnWait         prometheus.Histogram
	turnWaiting      prometheus.Gauge
	turnLeaseExpired prometheus.Counter
	eventsSent       prometheus.Counter
	subscribersCut   *prometheus.CounterVec
	deliveryDelay    prometheus.Histogram

	// The adaptive write budget (Budget.Run).
	writeRate         prometheus.Gauge
	writeRateFloor    prometheus.Gauge
	wakeDelay         prometheus.Histogram
	wakeDelaySignal   prometheus.Gauge
	wakeDelayBaseline prometheus.Gauge
	rateDecisions     *prometheus.CounterVec

	// The labelled counters, resolved once.
	cut       map[string]prometheus.Counter // by reason
	decisions map[decision]prometheus.Counter
}

// NewMetrics returns the collectors, at zero and unregistered.
func NewMetrics() *Metrics {
	m := &Metrics{
		watchers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "watchers",
			Help: "Subscribers of the watch hub, catching up or live, by database.",
		}, []string{"db"}),
		prefixes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "prefixes",
			Help: "Distinct prefixes of live watchers, by database: each change is filtered, buffered and encoded once per prefix.",
		}, []string{"db"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "refused_total",
			Help: "Watches refused because the process already serves its maximum (watch_max_watchers).",
		}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "writes_total",
			Help: "Writes to watch streams (changes, progress lines); events_sent_total / writes_total is how many changes a write carries.",
		}),
		turnWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "turn_wait_seconds",
			Help:    "Time a watch stream waited for its write turn (the write budget: watch_write_rate, watch_write_concurrency) before a write; it grows while a storm is spread out.",
			Buckets: metrics.LatencyBuckets,
		}),
		turnWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "turn_waiting",
			Help: "Watch streams waiting for a write turn now.",
		}),
		turnLeaseExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "turn_lease_expired_total",
			Help: "Writes to a watch stream that outlasted their turn (2ms): a client not reading, or a descheduled thread.",
		}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "events_sent_total",
			Help: "Changes (one per key set or deleted) written to watchers.",
		}),
		subscribersCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "subscribers_cut_total",
			Help: "Watchers ended by the server, by reason: slow (fell behind its prefix's buffer), truncated (the hub fell behind the retained log), shutdown.",
		}, []string{"reason"}),
		deliveryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "delivery_delay_seconds",
			Help:    "Time from an entry's commit (its root timestamp) to its changes being written to a watcher, per entry and watcher.",
			Buckets: metrics.LatencyBuckets,
		}),
		hubLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "hub_lag_entries",
			Help: "Applied entries the watch hub has not fanned out yet, by database.",
		}, []string{"db"}),
		hubRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "hub_read_entries_total",
			Help: "Log entries the watch hub read back from the store and fanned out to live watchers, by database.",
		}, []string{"db"}),
		hubSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "hub_skipped_entries_total",
			Help: "Log entries the watch hub passed without reading them because no watcher was live, by database (watchers arriving later read the log themselves).",
		}, []string{"db"}),

		writeRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "write_rate",
			Help: "Write turns per second the watch budget allows now: adapted between write_rate_floor and watch_write_rate to what delivery costs readers.",
		}),
		writeRateFloor: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "write_rate_floor",
			Help: "Lowest write rate the watch budget may set now: a turn every 2 s per watcher, at least 100/s.",
		}),
		wakeDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "wake_delay_seconds",
			Help:    "How late a goroutine woken by the network ran (the watch budget's probe, every 2ms while there are watchers): what a reader's request waits before it is served.",
			Buckets: metrics.LatencyBuckets,
		}),
		wakeDelaySignal: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "wake_delay_signal_seconds",
			Help: "The watch budget's signal in the last 100ms window: the 90th percentile of wake_delay_seconds; over watch_wake_delay_target (1ms), or over 2x wake_delay_baseline_seconds (at least +200µs), the write rate is cut.",
		}),
		wakeDelayBaseline: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "wake_delay_baseline_seconds",
			Help: "The same percentile while no watcher writes, measured by holding every write turn for 20ms about once a second: the signal may exceed it by 2x (at least 200µs) before the write rate is cut.",
		}),
		rateDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "rate_decisions_total",
			Help: "Decisions of the watch budget, one per 100ms window with watchers: raise, cut, hold, gc_forgiven (over target in a window where a GC cycle started or ended: forgiven, up to 2 in a row), no_signal (no probe came back).",
		}, []string{"decision"}),
	}
	// Every reason and decision has its series from the start, at 0.
	m.cut = map[string]prometheus.Counter{}
	for _, r := range []string{cutSlow, cutTruncated, cutShutdown} {
		m.cut[r] = m.subscribersCut.WithLabelValues(r)
	}
	m.decisions = map[decision]prometheus.Counter{}
	for _, d := range decisions {
		m.decisions[d] = m.rateDecisions.WithLabelValues(string(d))
	}
	m.Group = metrics.Group{
		m.watchers, m.prefixes, m.hubLag, m.hubRead, m.hubSkipped,
		m.refused, m.writes, m.turnWait, m.turnWaiting, m.turnLeaseExpired,
		m.eventsSent, m.subscribersCut, m.deliveryDelay,
		m.writeRate, m.writeRateFloor, m.wakeDelay, m.wakeDelaySignal,
		m.wakeDelayBaseline, m.rateDecisions,
	}
	return m
}
