package watch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

func batchOf(index uint64, keys ...string) *Batch {
	var evs []Event
	for _, k := range keys {
		evs = append(evs, Event{Index: index, Key: []byte(k), Value: []byte("0123456789")})
	}
	return newBatch(evs)
}

// retained lists the indexes of the batches a reader starting at from
// can still read, stopping at the first evicted one.
func retained(from *node) []uint64 {
	var out []uint64
	for n := from.next.Load(); n != nil; n = n.next.Load() {
		b := n.batch.Load()
		if b == nil && n.err == nil {
			out = append(out, 0) // evicted
			continue
		}
		if b != nil {
			out = append(out, b.Last())
		}
	}
	return out
}

// TestFeedBounds: a feed keeps the newest batches within its count and
// byte bounds, always the newest one, and a reader that started before
// the evicted ones finds them empty.
func TestFeedBounds(t *testing.T) {
	f := newFeed([]byte("p"), 3, 1<<20)
	start := f.tail
	for i := range 5 {
		f.append(batchOf(uint64(i+1), "p1"))
	}
	if got := fmt.Sprint(retained(start)); got != "[0 0 3 4 5]" {
		t.Fatalf("count bound 3: %s", got)
	}
	if f.retained != 3 || f.bytes != 3*12 {
		t.Fatalf("retained %d batches, %d bytes", f.retained, f.bytes)
	}

	f = newFeed([]byte("p"), 100, 30) // 12 bytes a batch: two fit
	start = f.tail
	for i := range 4 {
		f.append(batchOf(uint64(i+1), "p1"))
	}
	if got := fmt.Sprint(retained(start)); got != "[0 0 3 4]" {
		t.Fatalf("byte bound 30: %s", got)
	}
	f.append(batchOf(5, "p1", "p2", "p3", "p4")) // 48 bytes alone: kept
	if got := fmt.Sprint(retained(start)); got != "[0 0 0 0 5]" || f.retained != 1 {
		t.Fatalf("oversized newest batch: %s, %d retained", got, f.retained)
	}
}

// TestFeedErr: an error node ends the feed for its readers, is never
// evicted, and eviction skips over it.
func TestFeedErr(t *testing.T) {
	f := newFeed([]byte("p"), 2, 1<<20)
	start := f.tail
	f.append(batchOf(1, "p"))
	cut := errors.New("cut")
	f.appendErr(cut)
	f.append(batchOf(2, "p"))
	f.append(batchOf(3, "p"))
	n := start.next.Load()
	if n.batch.Load() != nil {
		t.Fatal("batch 1 not evicted")
	}
	if e := n.next.Load(); e.err != cut {
		t.Fatalf("error node %+v", e)
	}
	if got := fmt.Sprint(retained(start)); got != "[0 2 3]" {
		t.Fatalf("after the error: %s", got)
	}
	select {
	case <-start.ready:
	default:
		t.Fatal("ready of a node with a successor not closed")
	}
	select {
	case <-f.tail.ready:
		t.Fatal("ready of the tail closed")
	default:
	}
}

// TestBatchEncodedOnce: however many subscribers encode a batch at once,
// the encoder runs once and all get the same bytes.
func TestBatchEncodedOnce(t *testing.T) {
	b := batchOf(7, "a", "b")
	var calls atomic.Int32
	enc := func(dst []byte, evs []Event) []byte {
		calls.Add(1)
		for _, e := range evs {
			dst = append(dst, e.Key...)
		}
		return dst
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := string(b.Encoded(enc)); got != "ab" {
				t.Errorf("encoded %q", got)
			}
		}()
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("encoder ran %d times", calls.Load())
	}
}

// TestFeedIndex: a key falls under every feed whose prefix it starts
// with, the empty prefix included, shortest first; removed feeds and
// their lengths are forgotten.
func TestFeedIndex(t *testing.T) {
	x := newFeedIndex()
	feeds := map[string]*feed{}
	for _, p := range []string{"", "a", "ab", "abc", "b", "abd"} {
		feeds[p] = newFeed([]byte(p), 1, 1)
		x.add(feeds[p])
	}
	names := func(key string) string {
		var out []string
		for _, f := range x.appendMatching(nil, []byte(key)) {
			out = append(out, fmt.Sprintf("%q", f.prefix))
		}
		return fmt.Sprint(out)
	}
	for key, want := range map[string]string{
		"abcz": `["" "a" "ab" "abc"]`,
		"abd":  `["" "a" "ab" "abd"]`,
		"b":    `["" "b"]`,
		"":     `[""]`,
		"c":    `[""]`,
	} {
		if got := names(key); got != want {
			t.Errorf("key %q matches %s, want %s", key, got, want)
		}
	}
	x.remove(feeds["abc"])
	if got := names("abcz"); got != `["" "a" "ab"]` {
		t.Errorf("after removing abc: %s", got)
	}
	x.remove(feeds["abd"]) // the last prefix of length 3
	if fmt.Sprint(x.lengths) != "[0 1 2]" || x.len() != 4 {
		t.Errorf("lengths %v, %d feeds", x.lengths, x.len())
	}
}

// TestFanOutMatchesFilter: whatever the prefixes (nested, empty, absent)
// and the entries (several changes, heartbeats), the batch the hub
// appends to each feed is exactly the filter of the entries by its prefix.
func TestFanOutMatchesFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = "ab/"[rng.IntN(3)]
		}
		return string(b)
	}
	for round := range 200 {
		h := &Hub{}
		h.mu.feeds = newFeedIndex()
		for range 1 + rng.IntN(8) {
			p := word(3)
			if h.mu.feeds.get([]byte(p)) == nil {
				h.mu.feeds.add(newFeed([]byte(p), 1<<20, 1<<30))
			}
		}
		var entries []wal.Entry
		for i := range 1 + rng.IntN(6) {
			e := wal.Entry{Index: uint64(i + 1), Kind: wal.KindData}
			if rng.IntN(5) == 0 {
				e.Kind = wal.KindHeartbeat
			} else {
				for range 1 + rng.IntN(4) {
					e.Ops = append(e.Ops, wal.Op{Type: wal.OpSet, Key: []byte(word(5)), Value: []byte("v")})
				}
			}
			entries = append(entries, e)
		}
		tails := map[*feed]*node{}
		for _, f := range h.mu.feeds.byPrefix {
			tails[f] = f.tail
		}
		h.fanOut(entries)
		for _, f := range h.mu.feeds.byPrefix {
			want := describe(appendMatching(nil, entries, f.prefix))
			var got []string
			if n := tails[f].next.Load(); n != nil {
				got = describe(n.batch.Load().Events)
				if n.next.Load() != nil {
					t.Fatalf("round %d: prefix %q got two batches", round, f.prefix)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d: prefix %q got %q, want %q", round, f.prefix, got, want)
			}
		}
	}
}
