package httpapi

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "http"

// route names a handled pattern for metrics. Labels carry route names,
// never raw paths, so that their number stays fixed.
type route uint8

const (
	routeGet route = iota
	routePut
	routeDelete
	routeBatch
	routeScan
	routeMget
	routeStatus
	routeUsage
	routeMembers
	routeDigest
	routeTree
	routeBridge
	routeOther // unknown paths and methods
	numRoutes
)

var routeNames = [numRoutes]string{
	routeGet:     "get",
	routePut:     "put",
	routeDelete:  "delete",
	routeBatch:   "batch",
	routeScan:    "scan",
	routeMget:    "mget",
	routeStatus:  "status",
	routeUsage:   "usage",
	routeDigest:  "digest",
	routeMembers: "members",
	routeTree:    "tree",
	routeBridge:  "bridge",
	routeOther:   "other",
}

func (r route) String() string { return routeNames[r] }

// Metrics are the collectors of the handlers and connection limits that
// share them: the server builds one per process and registers it (it is a
// prometheus.Collector); a handler or ConnLimit given none counts in a
// private one.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	requests         *prometheus.CounterVec
	errors           *prometheus.CounterVec
	seconds          *prometheus.HistogramVec
	minIndexWait     prometheus.Histogram
	minIndexTimeouts prometheus.Counter
	writeTimeouts    prometheus.Counter
	answersStreamed  prometheus.Counter
	connsRefused     prometheus.Counter
	answersCut       prometheus.Counter

	// Children resolved once, so that the read path does fewer label
	// lookups, and every error kind is exported (as 0) from the start.
	secondsByRoute [numRoutes]prometheus.Observer
	errorsByCode   [numCodes]prometheus.Counter
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "requests_total",
			Help: "Requests answered by the HTTP API, by database (empty if unknown), route and HTTP status.",
		}, []string{"db", "route", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "errors_total",
			Help: "Error answers of the HTTP API, by error code.",
		}, []string{"kind"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "request_duration_seconds",
			Help:    "Time to answer a request, min_index waits and body reads included, by route.",
			Buckets: metrics.LatencyBuckets,
		}, []string{"route"}),
		minIndexWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "min_index_wait_seconds",
			Help:    "Time reads with min_index waited for the index to be applied (only reads that had to wait).",
			Buckets: metrics.LatencyBuckets,
		}),
		minIndexTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "min_index_timeouts_total",
			Help: "Reads with min_index answered 504 because the index was not applied in time.",
		}),
		writeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "write_timeouts_total",
			Help: "Answers abandoned because the client took no part of them within the write timeout (the connection is closed).",
		}),
		answersStreamed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "answers_streamed_total",
			Help: "Scan and mget answers too large to build whole, sent as they were read.",
		}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "connections_refused_total",
			Help: "Requests answered 503 because max_http_conns connections were open (the reserve beyond it serves /healthz and /metrics only).",
		}),
		answersCut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "answers_cut_total",
			Help: "Streamed answers that failed part way (a read error or a client that stopped reading); the connection was cut.",
		}),
	}
	for r := range numRoutes {
		m.secondsByRoute[r] = m.seconds.WithLabelValues(r.String())
	}
	for c := range numCodes {
		m.errorsByCode[c] = m.errors.WithLabelValues(c.String())
	}
	m.Group = metrics.Group{m.requests, m.errors, m.seconds, m.minIndexWait, m.minIndexTimeouts,
		m.writeTimeouts, m.answersStreamed, m.connsRefused, m.answersCut}
	return m
}

// countOther counts a request answered outside a database route.
func (m *Metrics) countOther(status int) {
	m.requests.WithLabelValues("", routeOther.String(), statusLabel(status)).Inc()
}

// statusText holds the decimal text of every HTTP status, so that the code
// label costs no allocation.
var statusText [600]string

func init() {
	for i := range statusText {
		statusText[i] = strconv.Itoa(i)
	}
}

func statusLabel(status int) string {
	if status >= 0 && status < len(statusText) {
		return statusText[status]
	}
	return strconv.Itoa(status)
}
