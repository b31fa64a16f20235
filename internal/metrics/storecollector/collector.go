package storecollector

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/store"
)

const subsystem = "store"

// Stores is the collector of the process registry: the server adds each
// store it opens and removes it before closing it.
var Stores = metrics.MustRegister(New())

// Collector reports the metrics of the stores added to it.
type Collector struct {
	mu     sync.Mutex
	stores []*store.Store // in the order added
}

// New returns a collector of no stores (register it with a registry).
func New() *Collector { return &Collector{} }

// Add reports s from the next scrape on.
func (c *Collector) Add(s *store.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores = append(c.stores, s)
}

// Remove stops reporting s; call it before closing s.
func (c *Collector) Remove(s *store.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.stores {
		if x == s {
			c.stores = append(c.stores[:i], c.stores[i+1:]...)
			return
		}
	}
}

// snapshots returns the metrics of the stores added, one per database
// name: of two stores of one name in one process (tests with several
// nodes in one process), the first added is reported, since a registry
// refuses two series of one name and labels.
func (c *Collector) snapshots() []store.Metrics {
	c.mu.Lock()
	stores := append([]*store.Store(nil), c.stores...)
	c.mu.Unlock()
	seen := map[string]bool{}
	var out []store.Metrics
	for _, s := range stores {
		if seen[s.Name()] {
			continue
		}
		seen[s.Name()] = true
		out = append(out, s.Metrics())
	}
	return out
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, m := range c.snapshots() {
		collectStore(ch, &m, now)
		if m.Engine != nil {
			collectEngine(ch, m.Name, m.Engine)
		}
		if m.DiskOK {
			collectValues(ch, m.Name, &m.Disk, diskValues, nil)
		}
	}
}
