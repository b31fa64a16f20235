package gateway

import (
	"errors"
	"fmt"
	"slices"

	"github.com/quicksilver-kv/qs/internal/store"
)

// UnreadReport is the answer of GET /v1/{db}/usage?unread=true and
// qs usage --unread: per producer and prefix, the keys with no sampled
// read since Since (internal/keyuse).
type UnreadReport struct {
	DB    string `json:"db"`
	Index uint64 `json:"index"`
	// Since is the start of the window looked at (RFC 3339): the window
	// asked for, or when the node began collecting samples if later.
	Since string `json:"since"`
	// WindowSeconds is the length of the window looked at.
	WindowSeconds float64 `json:"window_seconds"`
	// SampleRate: one read in SampleRate was sampled.
	SampleRate int              `json:"sample_rate"`
	Producers  []ProducerUnread `json:"producers"`
	// Unowned is the keys under no producer's prefix (all keys when no
	// producers are configured). Left out when the report is for one
	// producer.
	Unowned *PrefixUnread `json:"unowned,omitempty"`
}

// ProducerUnread is one producer's keys and those of them unread.
type ProducerUnread struct {
	Name     string         `json:"name"`
	Keys     int64          `json:"keys"`
	Unread   int64          `json:"unread"`
	Prefixes []PrefixUnread `json:"prefixes"`
}

// PrefixUnread is one prefix's keys and those of them unread, with the
// first of them (in key order, at most the limit asked for).
type PrefixUnread struct {
	Prefix     string   `json:"prefix"`
	Keys       int64    `json:"keys"`
	Unread     int64    `json:"unread"`
	UnreadKeys []string `json:"unread_keys"`
}

// ErrNoKeyUse: the node collects no read samples for the database.
var ErrNoKeyUse = errors.New("qs: unread keys are known at the root of the tree, which collects the read samples of every node; ask the root")

// Unread reports, for the producers that may write db (one, if producer
// is not empty), the keys under each of their prefixes that read does
// not report as read, listing at most limit of them per prefix. A nil
// Gateway reports nothing (no producers).
//
// Cost: one pass over the records under each prefix, read from one view.
func (g *Gateway) Unread(st *store.Store, db, producer string, read func(key []byte) bool, limit int) (UnreadReport, error) {
	ps, err := g.producersOf(db, producer)
	if err != nil {
		return UnreadReport{}, err
	}
	v, err := st.View()
	if err != nil {
		return UnreadReport{}, err
	}
	defer v.Close()
	r := UnreadReport{DB: db, Index: v.Index(), Producers: []ProducerUnread{}}
	memo := map[string]PrefixUnread{}
	var all []string
	for _, p := range ps {
		pu := ProducerUnread{Name: p.name, Prefixes: []PrefixUnread{}}
		cover := coverOf(p.prefixes)
		for _, pre := range sortedUnique(p.prefixes) {
			u, ok := memo[pre]
			if !ok {
				if u, err = prefixUnread(v, pre, read, limit); err != nil {
					return UnreadReport{}, err
				}
				memo[pre] = u
			}
			pu.Prefixes = append(pu.Prefixes, u)
			if slices.Contains(cover, pre) {
				pu.Keys += u.Keys
				pu.Unread += u.Unread
			}
		}
		r.Producers = append(r.Producers, pu)
		all = append(all, p.prefixes...)
	}
	if producer == "" {
		owned := coverOf(all)
		u, err := prefixUnread(v, "", func(key []byte) bool {
			return underAny(key, owned) || read(key)
		}, limit)
		if err != nil {
			return UnreadReport{}, err
		}
		u.Keys -= ownedKeys(memo, owned)
		r.Unowned = &u
	}
	return r, nil
}

// underAny reports whether key is under one of the sorted prefixes.
func underAny(key []byte, prefixes []string) bool {
	for _, p := range prefixes {
		if len(key) >= len(p) && string(key[:len(p)]) == p {
			return true
		}
	}
	return false
}

// ownedKeys adds up the keys under the cover prefixes, all in memo.
func ownedKeys(memo map[string]PrefixUnread, cover []string) int64 {
	var n int64
	for _, p := range cover {
		n += memo[p].Keys
	}
	return n
}

func prefixUnread(v *store.View, prefix string, read func([]byte) bool, limit int) (PrefixUnread, error) {
	u := PrefixUnread{Prefix: prefix, UnreadKeys: []string{}}
	_, err := v.Scan([]byte(prefix), nil, 0, func(key, _ []byte, _ uint64) error {
		u.Keys++
		if !read(key) {
			u.Unread++
			if len(u.UnreadKeys) < limit {
				u.UnreadKeys = append(u.UnreadKeys, string(key))
			}
		}
		return nil
	})
	if err != nil {
		return PrefixUnread{}, fmt.Errorf("unread keys of prefix %q: %w", prefix, err)
	}
	return u, nil
}
