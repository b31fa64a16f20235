package gateway

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quicksilver-kv/qs/internal/store"
)

// UsageReport is the answer of GET /v1/{db}/usage and qs usage.
type UsageReport struct {
	DB string `json:"db"`
	// Index is the applied index every figure was read at.
	Index uint64 `json:"index"`
	// Total counts every live key of the database.
	Total Counts `json:"total"`
	// Producers are those that may write the database, by name.
	Producers []ProducerUsage `json:"producers"`
	// Unowned counts the keys under no producer's prefix. Left out when the
	// report is for one producer.
	Unowned *Counts `json:"unowned,omitempty"`
}

// Counts are live keys and their bytes as written by clients.
type Counts struct {
	Keys       int64 `json:"keys"`
	KeyBytes   int64 `json:"key_bytes"`
	ValueBytes int64 `json:"value_bytes"`
}

// Figures are Counts with what the keys cost in the store
// (store.Usage; docs/storage.md "Space per key").
type Figures struct {
	Counts
	// OverheadBytes is StoredBytes − KeyBytes − ValueBytes: record
	// headers, keyspace prefixes, Pebble key trailers, chunk keys.
	OverheadBytes int64 `json:"overhead_bytes"`
	StoredBytes   int64 `json:"stored_bytes"`
}

func figures(u store.Usage) Figures {
	return Figures{Counts: Counts{Keys: u.Keys, KeyBytes: u.KeyBytes, ValueBytes: u.ValueBytes}, OverheadBytes: u.Overhead(), StoredBytes: u.StoredBytes}
}

// ProducerUsage is what one producer's prefixes hold. A key under two
// prefixes of the producer is counted once (the shorter prefix covers the
// longer one); a key under prefixes of two producers is counted for both.
type ProducerUsage struct {
	Name string `json:"name"`
	Figures
	Prefixes []PrefixUsage `json:"prefixes"`
}

// PrefixUsage is what one prefix holds.
type PrefixUsage struct {
	Prefix string `json:"prefix"`
	Figures
}

// Usage reports what the producers allowed in database db hold in st, all
// read from one view. producer, when not empty, restricts the report to
// that producer (ErrUnknownProducer if it may not write db). A nil Gateway
// reports totals only, with every key unowned.
//
// Cost: one sequential pass over the value records under each distinct
// prefix (store.View.PrefixUsage); nested prefixes of different producers
// are read once each.
func (g *Gateway) Usage(st *store.Store, db, producer string) (UsageReport, error) {
	ps, err := g.producersOf(db, producer)
	if err != nil {
		return UsageReport{}, err
	}
	v, err := st.View()
	if err != nil {
		return UsageReport{}, err
	}
	defer v.Close()
	r := UsageReport{DB: db, Index: v.Index(), Producers: []ProducerUsage{}}
	tot, err := v.Totals()
	if err != nil {
		return UsageReport{}, err
	}
	r.Total = figures(tot).Counts

	memo := map[string]store.Usage{}
	usage := func(prefix string) (store.Usage, error) {
		if u, ok := memo[prefix]; ok {
			return u, nil
		}
		u, err := v.PrefixUsage([]byte(prefix))
		if err != nil {
			return store.Usage{}, fmt.Errorf("usage of prefix %q: %w", prefix, err)
		}
		memo[prefix] = u
		return u, nil
	}
	var all []string
	for _, p := range ps {
		pu := ProducerUsage{Name: p.name}
		var sum store.Usage
		cover := coverOf(p.prefixes)
		for _, pre := range sortedUnique(p.prefixes) {
			u, err := usage(pre)
			if err != nil {
				return UsageReport{}, err
			}
			pu.Prefixes = append(pu.Prefixes, PrefixUsage{Prefix: pre, Figures: figures(u)})
			if slices.Contains(cover, pre) {
				sum = sum.Add(u)
			}
		}
		pu.Figures = figures(sum)
		r.Producers = append(r.Producers, pu)
		all = append(all, p.prefixes...)
	}
	if producer == "" {
		var owned store.Usage
		for _, pre := range coverOf(all) {
			owned = owned.Add(memo[pre]) // every prefix of the cover was read above
		}
		r.Unowned = &Counts{Keys: tot.Keys - owned.Keys, KeyBytes: tot.KeyBytes - owned.KeyBytes, ValueBytes: tot.ValueBytes - owned.ValueBytes}
	}
	return r, nil
}

// producersOf returns the producers that may write db: all of them, or
// the one named producer (ErrUnknownProducer if it may not). A nil
// gateway has none.
func (g *Gateway) producersOf(db, producer string) ([]*Producer, error) {
	var ps []*Producer
	if g != nil {
		for _, p := range g.table.Load().producers {
			if p.mayWrite(db) && (producer == "" || p.name == producer) {
				ps = append(ps, p)
			}
		}
	}
	if producer != "" && len(ps) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProducer, producer)
	}
	return ps, nil
}

// coverOf returns the prefixes of ps that no other prefix of ps covers,
// sorted: the keys under ps are the disjoint union of the keys under them.
func coverOf(ps []string) []string {
	var out []string
	for _, p := range sortedUnique(ps) {
		// In sorted order every string between q and p has q as prefix if p
		// does, so only the last prefix kept can cover p.
		if n := len(out); n > 0 && strings.HasPrefix(p, out[n-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func sortedUnique(ps []string) []string {
	s := slices.Clone(ps)
	slices.Sort(s)
	return slices.Compact(s)
}
