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

// Collectors, shared by every Gateway of the process. The producer label
// takes the names of the producers file (bounded; series of a producer
// removed by a reload are deleted), or "" for writes refused before a
// producer is known.
var (
	requestsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "requests_total",
		Help: "Writes admitted by the gateway (they may still fail in the store), by producer.",
	}, []string{"producer"}))
	opsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "ops_total",
		Help: "Operations of the writes admitted, by producer.",
	}, []string{"producer"}))
	bytesTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bytes_total",
		Help: "Key and value bytes of the writes admitted, by producer.",
	}, []string{"producer"}))
	rejectionsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "rejections_total",
		Help: "Writes refused by the gateway, by producer and reason (unauthenticated, invalid_token, forbidden, quota_ops, quota_bytes, over_burst, memcache).",
	}, []string{"producer", "reason"}))
	throttleSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "throttle_wait_seconds",
		Help:    "Time writes were held back by their producer's quota before being admitted (only writes that waited), by producer.",
		Buckets: metrics.LatencyBuckets,
	}, []string{"producer"}))
	producersGauge = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "producers",
		Help: "Producers in the loaded producers file.",
	}))
	reloadsTotal = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reloads_total",
		Help: "Loads of the producers file whose content changed, by result (ok, error: the previous producers stay in force).",
	}, []string{"result"}))
)

// producerMetrics are the children of one producer, resolved once per load
// so that the write path does no label lookup.
type producerMetrics struct {
	requests, ops, bytes prometheus.Counter
	throttled            prometheus.Observer
	rejected             map[string]prometheus.Counter
}

func newProducerMetrics(name string) producerMetrics {
	m := producerMetrics{
		requests:  requestsTotal.WithLabelValues(name),
		ops:       opsTotal.WithLabelValues(name),
		bytes:     bytesTotal.WithLabelValues(name),
		throttled: throttleSeconds.WithLabelValues(name),
		rejected:  map[string]prometheus.Counter{},
	}
	for _, r := range []string{reasonForbidden, reasonQuotaOps, reasonQuotaBytes, reasonOverBurst} {
		m.rejected[r] = rejectionsTotal.WithLabelValues(name, r)
	}
	return m
}

// deleteProducerMetrics drops the series of a producer no longer in the
// file.
func deleteProducerMetrics(name string) {
	l := prometheus.Labels{"producer": name}
	requestsTotal.DeletePartialMatch(l)
	opsTotal.DeletePartialMatch(l)
	bytesTotal.DeletePartialMatch(l)
	rejectionsTotal.DeletePartialMatch(l)
	throttleSeconds.DeletePartialMatch(l)
}

var (
	rejectedUnauthenticated = rejectionsTotal.WithLabelValues("", reasonUnauthenticated)
	rejectedInvalidToken    = rejectionsTotal.WithLabelValues("", reasonInvalidToken)
	rejectedMemcache        = rejectionsTotal.WithLabelValues("", reasonMemcache)
	reloadsOK               = reloadsTotal.WithLabelValues("ok")
	reloadsFailed           = reloadsTotal.WithLabelValues("error")
)
