package store

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

// The log's clock (the time of the last applied entry) against this
// node's: positive when the log is dated ahead of local time (a root or
// member whose clock runs ahead; replica lag then reads below 0),
// negative by the age of the last entry otherwise.
var (
	dLogClockAhead = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, "log_clock_ahead_seconds"),
		"Time of the last applied log entry minus this node's clock: above 0, the log is dated in this node's future; below, by how much it is behind.",
		[]string{"db"}, nil)
	_ = metrics.MustRegister(logClockCollector{})
)

// logClockCollector reports dLogClockAhead for every open store (those
// the engine collector knows), computed at scrape time.
type logClockCollector struct{}

func (logClockCollector) Describe(ch chan<- *prometheus.Desc) { ch <- dLogClockAhead }

func (logClockCollector) Collect(ch chan<- prometheus.Metric) {
	engine.mu.Lock()
	defer engine.mu.Unlock()
	now := time.Now()
	seen := map[string]bool{}
	for s := range engine.stores {
		t := s.AppliedTime()
		if seen[s.opts.Name] || t.IsZero() {
			continue
		}
		seen[s.opts.Name] = true
		ch <- prometheus.MustNewConstMetric(dLogClockAhead, prometheus.GaugeValue, t.Sub(now).Seconds(), s.opts.Name)
	}
}
