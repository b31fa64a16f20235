// Package metrics holds the one Prometheus registry of the process. Names
// use namespace "qs" and the package's job as subsystem. A component
// counts in one of two ways: in a Metrics of its package that is itself
// a collector, handed to each instance and registered here once per
// process (the doors, the gateway, the watch hubs, the Raft root,
// discovery, cluster authentication, replication, the proxy pool, the
// bridges and the server's own mechanisms); or in a plain struct of each
// instance, exported by a collector elsewhere (the store, through
// metrics/storecollector). Only the process-wide garbage-collector floor
// (gcfloor) and C allocator trim (ctrim) declare their metrics at package
// level.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace is the prefix of every metric name.
const Namespace = "qs"

// Registry is the process-wide registry served at /metrics.
var Registry = prometheus.NewRegistry()

func init() {
	Registry.MustRegister(
		// The default Go metrics, plus the scheduler's: go_sched_latencies_seconds
		// (how long goroutines wait to run) shows a process short of CPU.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
}

// MustRegister registers collectors with Registry and returns the first, so
// a package can write `var x = metrics.MustRegister(prometheus.NewCounterVec(...))`.
func MustRegister[T prometheus.Collector](c T, more ...prometheus.Collector) T {
	Registry.MustRegister(c)
	Registry.MustRegister(more...)
	return c
}

// Handler serves Registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry})
}

// LatencyBuckets are histogram buckets for request latencies, from 10µs to 10s.
var LatencyBuckets = prometheus.ExponentialBucketsRange(10e-6, 10, 25)

// Group is a collector made of others: a component's Metrics embeds one
// holding its collectors, and so is itself a collector its owner
// registers once.
type Group []prometheus.Collector

// Describe implements prometheus.Collector.
func (g Group) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (g Group) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g {
		c.Collect(ch)
	}
}
