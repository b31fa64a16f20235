package bridge

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

// The metrics of the bridge running in this process (one per process).
var (
	RowsCopied = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "rows_copied_total",
		Help: "Rows (or keys) written to qs by initial copies.",
	}))
	CopyDone = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "copy_complete",
		Help: "1 once the initial copy is complete and the bridge follows changes, else 0.",
	}))
	Transactions = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "transactions_total",
		Help: "Source transactions by outcome: applied (one qs batch), skipped (already in qs, resent after a restart).",
	}, []string{"outcome"}))
	ChangesApplied = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "changes_applied_total",
		Help: "Key sets and deletes written to qs while following changes.",
	}))
	LagBytes = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "lag_bytes",
		Help: "Source log bytes (PostgreSQL WAL) the source has written beyond the position stored in qs.",
	}))
	LagRevisions = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "lag_revisions",
		Help: "etcd revisions beyond the revision stored in qs.",
	}))
	LagEntries = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "lag_entries",
		Help: "Log entries the source root holds beyond the bridged root (qs bridge qs).",
	}))
	LagSeconds = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "lag_seconds",
		Help: "Age of the oldest source change not yet in qs: 0 when caught up.",
	}))
	ApplySeconds = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "apply_seconds",
		Help:    "Time from a source transaction's commit to qs acknowledging its batch.",
		Buckets: metrics.LatencyBuckets,
	}))
	Position = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "position",
		Help: "Source position stored in qs (LSN as a number, etcd revision, or the bridged root's log index).",
	}))
	Errors = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "errors_total",
		Help: "Errors by kind: config (no primary key, wal_level, permission, bad flags, another database id), slot_lost, compacted, decode, source, write, conflict, diverged (a bridged root whose log is not the source's).",
	}, []string{"kind"}))
	Restarts = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "bridge", Name: "restarts_total",
		Help: "Times the bridge reconnected to its source or qs after a transient error.",
	}))
)
