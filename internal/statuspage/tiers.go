package statuspage

import (
	dto "github.com/prometheus/client_model/go"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

// Counters are the cumulative read counters of one database's cache tiers,
// as its metrics export them.
type Counters struct {
	MemoryHits, MemoryMisses float64 // qs_store_read_cache_lookups_total
	// DiskHits counts proxy reads answered from the proxy's own store
	// (values held, and keys known absent); DiskMisses those fetched.
	DiskHits, DiskMisses float64 // qs_store_proxy_lookups_total
	FetchOK, FetchFailed float64 // qs_proxy_fetches_total
}

// ReadCounters returns the counters of every database from the process's
// metrics, by database name.
func ReadCounters() map[string]Counters {
	mfs, err := metrics.Registry.Gather()
	if err != nil && len(mfs) == 0 {
		return nil
	}
	out := map[string]Counters{}
	add := func(m *dto.Metric, fn func(c *Counters, result string, v float64)) {
		var db, result string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "db":
				db = l.GetValue()
			case "result":
				result = l.GetValue()
			}
		}
		c := out[db]
		fn(&c, result, m.GetCounter().GetValue())
		out[db] = c
	}
	for _, mf := range mfs {
		var fn func(c *Counters, result string, v float64)
		switch mf.GetName() {
		case "qs_store_read_cache_lookups_total":
			fn = func(c *Counters, result string, v float64) {
				switch result {
				case "hit":
					c.MemoryHits = v
				case "miss":
					c.MemoryMisses = v
				}
			}
		case "qs_store_proxy_lookups_total":
			fn = func(c *Counters, result string, v float64) {
				switch result {
				case "hit", "negative":
					c.DiskHits += v
				case "miss":
					c.DiskMisses = v
				}
			}
		case "qs_proxy_fetches_total":
			fn = func(c *Counters, result string, v float64) {
				switch result {
				case "ok":
					c.FetchOK = v
				case "failed":
					c.FetchFailed = v
				}
			}
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			add(m, fn)
		}
	}
	return out
}

// Tier is one cache tier's hits over the last minute.
type Tier struct {
	// Name: memory (the read cache), disk (values a proxy holds), replicas
	// (values a proxy fetched: a hit is a fetch that succeeded).
	Name    string `json:"name"`
	Hits    uint64 `json:"hits"`
	Lookups uint64 `json:"lookups"`
	// HitRate is Hits/Lookups, null without lookups.
	HitRate *float64 `json:"hit_rate"`
}

// Tiers returns the hit rates over the last minute of samples in pts
// (oldest first); proxy adds the proxy's own tiers to the read cache.
func Tiers(pts []Point, proxy bool) []Tier {
	if len(pts) == 0 {
		return nil
	}
	last := pts[len(pts)-1]
	first := last
	for i := len(pts) - 1; i >= 0 && last.T-pts[i].T <= tierWindow.Milliseconds(); i-- {
		first = pts[i]
	}
	a, b := first.Counters, last.Counters
	tier := func(name string, hits, misses float64) Tier {
		t := Tier{Name: name, Hits: uint64(max(hits, 0)), Lookups: uint64(max(hits+misses, 0))}
		if t.Lookups > 0 {
			r := float64(t.Hits) / float64(t.Lookups)
			t.HitRate = &r
		}
		return t
	}
	out := []Tier{tier("memory", b.MemoryHits-a.MemoryHits, b.MemoryMisses-a.MemoryMisses)}
	if proxy {
		out = append(out, tier("disk", b.DiskHits-a.DiskHits, b.DiskMisses-a.DiskMisses),
			tier("replicas", b.FetchOK-a.FetchOK, b.FetchFailed-a.FetchFailed))
	}
	return out
}
