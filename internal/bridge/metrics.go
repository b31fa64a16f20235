package bridge

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "bridge"

// Metrics are the collectors of a bridge (pgbridge, etcdbridge,
// qsbridge): whoever runs one builds them once per process and registers
// them (a Metrics is a prometheus.Collector), and gives them to the
// bridge in its Config; a bridge given none counts in a private one,
// registered nowhere, which a test reads.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	RowsCopied     prometheus.Counter
	CopyDone       prometheus.Gauge
	Transactions   *prometheus.CounterVec // by outcome
	ChangesApplied prometheus.Counter
	LagBytes       prometheus.Gauge
	LagRevisions   prometheus.Gauge
	LagEntries     prometheus.Gauge
	LagSeconds     prometheus.Gauge
	ApplySeconds   prometheus.Histogram
	Position       prometheus.Gauge
	Errors         *prometheus.CounterVec // by kind
	Restarts       prometheus.Counter
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		RowsCopied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "rows_copied_total",
			Help: "Rows (or keys) written to qs by initial copies.",
		}),
		CopyDone: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "copy_complete",
			Help: "1 once the initial copy is complete and the bridge follows changes, else 0.",
		}),
		Transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "transactions_total",
			Help: "Source transactions by outcome: applied (one qs batch), skipped (already in qs, resent after a restart).",
		}, []string{"outcome"}),
		ChangesApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "changes_applied_total",
			Help: "Key sets and deletes written to qs while following changes.",
		}),
		LagBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "lag_bytes",
			Help: "Source log bytes (PostgreSQL WAL) the source has written beyond the position stored in qs.",
		}),
		LagRevisions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "lag_revisions",
			Help: "etcd revisions beyond the revision stored in qs.",
		}),
		LagEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "lag_entries",
			Help: "Log entries the source root holds beyond the bridged root (qs bridge qs).",
		}),
		LagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "lag_seconds",
			Help: "Age of the oldest source change not yet in qs: 0 when caught up.",
		}),
		ApplySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_seconds",
			Help:    "Time from a source transaction's commit to qs acknowledging its batch.",
			Buckets: metrics.LatencyBuckets,
		}),
		Position: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "position",
			Help: "Source position stored in qs (LSN as a number, etcd revision, or the bridged root's log index).",
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "errors_total",
			Help: "Errors by kind: config (no primary key, wal_level, permission, bad flags, another database id), slot_lost, compacted, decode, source, write, moved (an earlier batch of the bridge landed late; resumed), conflict, diverged (a bridged root whose log is not the source's).",
		}, []string{"kind"}),
		Restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "restarts_total",
			Help: "Times the bridge reconnected to its source or qs after a transient error.",
		}),
	}
	m.Group = metrics.Group{m.RowsCopied, m.CopyDone, m.Transactions, m.ChangesApplied, m.LagBytes, m.LagRevisions,
		m.LagEntries, m.LagSeconds, m.ApplySeconds, m.Position, m.Errors, m.Restarts}
	return m
}

// OrNew returns m, or a private Metrics when m is nil: what a bridge
// counts in when its Config gives none.
func OrNew(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics()
	}
	return m
}
