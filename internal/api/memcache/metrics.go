package memcache

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "memcache"

// Collectors, shared by every Server of the process.
var (
	requestsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "requests_total",
		Help: "Requests received by the memcached front door, by command (invalid: unparsable or unknown).",
	}, []string{"cmd"}))
	errorsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "errors_total",
		Help: "Requests and connections that ended in an error, by kind.",
	}, []string{"kind"}))
	requestSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "request_duration_seconds",
		Help:    "Time from the first byte of a request to its reply being ready, by command.",
		Buckets: metrics.LatencyBuckets,
	}, []string{"cmd"}))
	connectionsOpen = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "connections",
		Help: "Connections being served.",
	}))
	connectionsTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "connections_total",
		Help: "Connections accepted and served (rejected ones are counted in errors_total{kind=\"too_many_conns\"}).",
	}))
	idleEvictionsTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "idle_evictions_total",
		Help: "Idle connections closed to make room for a new one at the connection limit (memcached's idle kicks).",
	}))
	threadConnections = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "thread_connections",
		Help: "Connections served on a dedicated thread with blocking socket calls (memcache_threads); the others go through Go's network poller.",
	}))
	loopConnections = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "loop_connections",
		Help: "Connections served by the event loops (memcache_event_loops), parked or handed to a goroutine for a request that waits.",
	}))
	readNice = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "read_nice",
		Help: "Nice value of the dedicated threads while they serve reads (memcache_read_nice); 0 until one did, and if the system refused it.",
	}))
	readSliceSeconds = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "thread_slice_seconds",
		Help: "Scheduling slice the dedicated threads asked the kernel for (a shorter one lets a woken reader preempt long-running work); 0 until one did, and if the system refused it.",
	}))
	getHitsTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "get_hits_total",
		Help: "Keys found by get and gets.",
	}))
	getMissesTotal = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "get_misses_total",
		Help: "Keys not found by get and gets.",
	}))
)

// Children resolved once, so the read path does no label lookups, and every
// label value is exported (as 0) from the start.
var (
	requestsByCmd [numCommands]prometheus.Counter
	secondsByCmd  [numCommands]prometheus.Observer
	errorsByKind  [numErrKinds]prometheus.Counter
)

func init() {
	for c := range numCommands {
		requestsByCmd[c] = requestsTotal.WithLabelValues(c.String())
		secondsByCmd[c] = requestSeconds.WithLabelValues(c.String())
	}
	for k := range numErrKinds {
		errorsByKind[k] = errorsTotal.WithLabelValues(k.String())
	}
}
