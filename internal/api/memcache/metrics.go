package memcache

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "memcache"

// Metrics holds the qs_memcache_* collectors. One Metrics may be shared by
// every Server of a process (Config.Metrics); it is a prometheus.Collector,
// registered by its owner.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	requestsTotal      *prometheus.CounterVec
	errorsTotal        *prometheus.CounterVec
	requestSeconds     *prometheus.HistogramVec
	connectionsOpen    prometheus.Gauge
	connectionsTotal   prometheus.Counter
	idleEvictionsTotal prometheus.Counter
	threadConnections  prometheus.Gauge
	loopConnections    prometheus.Gauge
	loopHandoffsTotal  prometheus.Counter
	readNice           prometheus.Gauge
	readSliceSeconds   prometheus.Gauge
	getHitsTotal       prometheus.Counter
	getMissesTotal     prometheus.Counter

	// Children resolved once, so the read path does no label lookups, and
	// every label value is exported (as 0) from the start.
	requestsByCmd [numCommands]prometheus.Counter
	secondsByCmd  [numCommands]prometheus.Observer
	errorsByKind  [numErrKinds]prometheus.Counter
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		requestsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "requests_total",
			Help: "Requests received by the memcached front door, by command (invalid: unparsable or unknown).",
		}, []string{"cmd"}),
		errorsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "errors_total",
			Help: "Requests and connections that ended in an error, by kind.",
		}, []string{"kind"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "request_duration_seconds",
			Help:    "Time from the first byte of a request to its reply being ready, by command.",
			Buckets: metrics.LatencyBuckets,
		}, []string{"cmd"}),
		connectionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "connections",
			Help: "Connections being served.",
		}),
		connectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "connections_total",
			Help: "Connections accepted and served (rejected ones are counted in errors_total{kind=\"too_many_conns\"}).",
		}),
		idleEvictionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "idle_evictions_total",
			Help: "Idle connections closed to make room for a new one at the connection limit (memcached's idle kicks).",
		}),
		threadConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "thread_connections",
			Help: "Connections served on a dedicated thread with blocking socket calls (memcache_threads); the others go through Go's network poller.",
		}),
		loopConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "loop_connections",
			Help: "Connections served by the event loops (memcache_event_loops), parked or handed to a goroutine for a request that waits.",
		}),
		loopHandoffsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "loop_handoffs_total",
			Help: "Times an event loop handed a connection to a goroutine for a request that may wait (a write, a request not yet whole, meta and binary requests, a reply the socket had no room for); gets are answered on the loop's thread.",
		}),
		readNice: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "read_nice",
			Help: "Nice value of the dedicated threads while they serve reads (memcache_read_nice); 0 until one did, and if the system refused it.",
		}),
		readSliceSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "thread_slice_seconds",
			Help: "Scheduling slice the dedicated threads asked the kernel for (a shorter one lets a woken reader preempt long-running work); 0 until one did, and if the system refused it.",
		}),
		getHitsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "get_hits_total",
			Help: "Keys found by get and gets.",
		}),
		getMissesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "get_misses_total",
			Help: "Keys not found by get and gets.",
		}),
	}
	for c := range numCommands {
		m.requestsByCmd[c] = m.requestsTotal.WithLabelValues(c.String())
		m.secondsByCmd[c] = m.requestSeconds.WithLabelValues(c.String())
	}
	for k := range numErrKinds {
		m.errorsByKind[k] = m.errorsTotal.WithLabelValues(k.String())
	}
	m.Group = metrics.Group{
		m.requestsTotal, m.errorsTotal, m.requestSeconds,
		m.connectionsOpen, m.connectionsTotal, m.idleEvictionsTotal,
		m.threadConnections, m.loopConnections, m.loopHandoffsTotal, m.readNice, m.readSliceSeconds,
		m.getHitsTotal, m.getMissesTotal,
	}
	return m
}
