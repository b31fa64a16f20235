package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "gateway"

// Reasons of qs_gateway_rejections_total.
const (
	reasonUnauthenticated = "unauthenticated"
	reasonInvalidToken    = "invalid_token"
	reasonForbidden       = "forbidden"
	reasonQuotaOps        = "quota_ops"
	reasonQuotaBytes      = "quota_bytes"
	reasonOverBurst       = "over_burst"
	reasonMemcache        = "memcache"
)

// Metrics are the collectors of the gateways that share them: the server
// builds one per process and registers it (it is a prometheus.Collector);
// a Gateway given none counts in a private one. The producer label takes
// the names of the producers file (bounded; series of a producer removed
// by a reload are deleted), or "" for writes refused before a producer is
// known.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	requests   *prometheus.CounterVec
	ops        *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	rejections *prometheus.CounterVec
	throttle   *prometheus.HistogramVec
	producers  prometheus.Gauge
	reloads    *prometheus.CounterVec

	// Children resolved once, so that the write path does no label
	// lookup.
	rejectedUnauthenticated prometheus.Counter
	rejectedInvalidToken    prometheus.Counter
	rejectedMemcache        prometheus.Counter
	reloadsOK               prometheus.Counter
	reloadsFailed           prometheus.Counter
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "requests_total",
			Help: "Writes admitted by the gateway (they may still fail in the store), by producer.",
		}, []string{"producer"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "ops_total",
			Help: "Operations of the writes admitted, by producer.",
		}, []string{"producer"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bytes_total",
			Help: "Key and value bytes of the writes admitted, by producer.",
		}, []string{"producer"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "rejections_total",
			Help: "Writes refused by the gateway, by producer and reason (unauthenticated, invalid_token, forbidden, quota_ops, quota_bytes, over_burst, memcache).",
		}, []string{"producer", "reason"}),
		throttle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "throttle_wait_seconds",
			Help:    "Time writes were held back by their producer's quota before being admitted (only writes that waited), by producer.",
			Buckets: metrics.LatencyBuckets,
		}, []string{"producer"}),
		producers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "producers",
			Help: "Producers in the loaded producers file.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reloads_total",
			Help: "Loads of the producers file whose content changed, by result (ok, error: the previous producers stay in force).",
		}, []string{"result"}),
	}
	m.rejectedUnauthenticated = m.rejections.WithLabelValues("", reasonUnauthenticated)
	m.rejectedInvalidToken = m.rejections.WithLabelValues("", reasonInvalidToken)
	m.rejectedMemcache = m.rejections.WithLabelValues("", reasonMemcache)
	m.reloadsOK = m.reloads.WithLabelValues("ok")
	m.reloadsFailed = m.reloads.WithLabelValues("error")
	m.Group = metrics.Group{m.requests, m.ops, m.bytes, m.rejections, m.throttle, m.producers, m.reloads}
	return m
}

// producerMetrics are the children of one producer, resolved once per load
// so that the write path does no label lookup.
type producerMetrics struct {
	requests, ops, bytes prometheus.Counter
	throttled            prometheus.Observer
	rejected             map[string]prometheus.Counter
}

func (m *Metrics) producer(name string) producerMetrics {
	p := producerMetrics{
		requests:  m.requests.WithLabelValues(name),
		ops:       m.ops.WithLabelValues(name),
		bytes:     m.bytes.WithLabelValues(name),
		throttled: m.throttle.WithLabelValues(name),
		rejected:  map[string]prometheus.Counter{},
	}
	for _, r := range []string{reasonForbidden, reasonQuotaOps, reasonQuotaBytes, reasonOverBurst} {
		p.rejected[r] = m.rejections.WithLabelValues(name, r)
	}
	return p
}

// deleteProducer drops the series of a producer no longer in the file.
func (m *Metrics) deleteProducer(name string) {
	l := prometheus.Labels{"producer": name}
	m.requests.DeletePartialMatch(l)
	m.ops.DeletePartialMatch(l)
	m.bytes.DeletePartialMatch(l)
	m.rejections.DeletePartialMatch(l)
	m.throttle.DeletePartialMatch(l)
}
