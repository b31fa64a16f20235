package statuspage

// Counters are the cumulative read counters of one database's cache tiers,
// as its metrics export them (the server reads them from the store's and
// the proxy's own counters, not through a scrape of every metric).
type Counters struct {
	MemoryHits, MemoryMisses float64 // qs_store_read_cache_lookups_total
	// DiskHits counts proxy reads answered from the proxy's own store
	// (values held, and keys known absent); DiskMisses those fetched.
	DiskHits, DiskMisses float64 // qs_store_proxy_lookups_total
	FetchOK, FetchFailed float64 // qs_proxy_fetches_total
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
