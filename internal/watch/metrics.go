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
	eventsSentTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "events_sent_total",
		Help: "Changes (one per key set or deleted) written to watchers.",
	}))
	subscribersCutTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "subscribers_cut_total",
		Help: "Watchers ended by the server, by reason: slow (buffer overflow), truncated (fell behind the retained log), shutdown.",
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
)

func init() {
	for _, r := range []string{cutSlow, cutTruncated, cutShutdown} {
		subscribersCutTotal.WithLabelValues(r)
	}
}
