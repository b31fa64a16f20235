package cache

import (
	"bytes"
	"fmt"
	"testing"
)

func val(n int) []byte { return bytes.Repeat([]byte{'v'}, n) }

// TestTransientOneHitCostsNoStore: a value fetched once and never read
// again is held, then forgotten, and never stored.
func TestTransientOneHitCostsNoStore(t *testing.T) {
	tr := NewTransient(10*(1000+transientOverhead+3), 0)
	for i := range 100 {
		if d := offer(tr, []byte(fmt.Sprintf("k%02d", i)), 7, val(1000)); d != Hold {
			t.Fatalf("one-hit value %d: %v, want hold", i, d)
		}
	}
	st := tr.Stats()
	if st.Values != 10 || st.Held != 100 || st.Evicted != 90 || st.Taken != 0 || st.GhostStored != 0 {
		t.Fatalf("stats %+v: want 10 held now, 100 held in all, 90 evicted, none stored", st)
	}
	if st.Bytes > 10*(1000+transientOverhead+3) {
		t.Fatalf("%d bytes held, over the budget", st.Bytes)
	}
}

// TestTransientSecondReadStores: a value read again while held leaves the
// tier to be stored; a key read again after it left the tier is stored
// at its next fetch (the ghost list).
func TestTransientSecondReadStores(t *testing.T) {
	tr := NewTransient(3*(100+transientOverhead+1), 0)
	if d := offer(tr, []byte("a"), 5, val(100)); d != Hold {
		t.Fatalf("first fetch: %v", d)
	}
	if v, ok := tr.Take([]byte("a"), 5); !ok || !bytes.Equal(v, val(100)) {
		t.Fatalf("second read: %q, %v", v, ok)
	}
	if _, ok := tr.Take([]byte("a"), 5); ok {
		t.Fatal("a taken value was taken twice")
	}
	// Push b out unread, then fetch it again: stored at once.
	offer(tr, []byte("b"), 5, val(100))
	for _, k := range []string{"c", "d", "e"} {
		offer(tr, []byte(k), 5, val(100))
	}
	if _, ok := tr.Take([]byte("b"), 5); ok {
		t.Fatal("b is still held beyond the budget")
	}
	if d := offer(tr, []byte("b"), 6, val(100)); d != Store {
		t.Fatalf("a ghost key fetched again: %v, want store", d)
	}
	if d := offer(tr, []byte("b"), 6, val(100)); d != Hold {
		t.Fatalf("a ghost hit must leave the ghost list: %v", d)
	}
	// Fetched again while held (the reader missed it): the second read.
	if d := offer(tr, []byte("b"), 6, val(100)); d != Store {
		t.Fatalf("a held value fetched again: %v, want store", d)
	}
	st := tr.Stats()
	if st.Taken != 2 || st.GhostStored != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTransientVersionsAreNotMixed(t *testing.T) {
	tr := NewTransient(1<<20, 0)
	offer(tr, []byte("k"), 5, []byte("old"))
	if _, ok := tr.Take([]byte("k"), 9); ok {
		t.Fatal("a held version was handed out for another")
	}
	if _, ok := tr.Take([]byte("k"), 5); ok {
		t.Fatal("a version asked past was kept")
	}
	offer(tr, []byte("k"), 5, []byte("old"))
	if d := offer(tr, []byte("k"), 9, []byte("new")); d != Hold {
		t.Fatalf("a newer version: %v, want hold", d)
	}
	if v, ok := tr.Take([]byte("k"), 9); !ok || string(v) != "new" {
		t.Fatalf("newer version read back as %q, %v", v, ok)
	}
	if st := tr.Stats(); st.Values != 0 || st.Bytes != 0 {
		t.Fatalf("empty tier counts %+v", st)
	}
}

func TestTransientTooLargeAndDisabled(t *testing.T) {
	tr := NewTransient(1000, 0)
	if d := offer(tr, []byte("big"), 1, val(2000)); d != Skip {
		t.Fatalf("a value larger than the tier: %v, want skip", d)
	}
	if d := offer(tr, []byte("big"), 1, val(2000)); d != Store {
		t.Fatalf("a large value fetched twice: %v, want store", d)
	}
	off := NewTransient(0, 0)
	if off.Enabled() {
		t.Fatal("a tier without budget is enabled")
	}
	if d := offer(off, []byte("k"), 1, val(10)); d != Store {
		t.Fatalf("no tier: %v, want store", d)
	}
	if _, ok := off.Take([]byte("k"), 1); ok {
		t.Fatal("no tier held a value")
	}
}

// TestTransientGhostListIsBounded: the ghost list keeps its newest keys
// up to its bound, and forgets the oldest.
func TestTransientGhostListIsBounded(t *testing.T) {
	tr := NewTransient(1, 0) // every value is larger: each key becomes a ghost
	n := 3 * minGhosts
	for i := range n {
		offer(tr, []byte(fmt.Sprint(i)), 1, val(10))
	}
	if g := tr.Stats().Ghosts; g != minGhosts {
		t.Fatalf("%d ghost keys, want the bound %d", g, minGhosts)
	}
	if d := offer(tr, []byte(fmt.Sprint(n-1)), 1, val(10)); d != Store {
		t.Fatalf("the newest ghost: %v, want store", d)
	}
	if d := offer(tr, []byte("0"), 1, val(10)); d != Skip {
		t.Fatalf("the oldest key, forgotten: %v, want skip", d)
	}
	// A key that left the list by a ghost hit and came back holds a new
	// slot: reusing its old slot must not forget it.
	tr = NewTransient(1, 0)
	a := []byte("a")
	for _, want := range []Decision{Skip, Store, Skip} { // slot 0, hit, slot 1
		if d := offer(tr, a, 1, val(10)); d != want {
			t.Fatalf("a: %v, want %v", d, want)
		}
	}
	for i := range minGhosts - 1 { // slots 2.., then slot 0 again
		offer(tr, []byte(fmt.Sprint("x", i)), 1, val(10))
	}
	if d := offer(tr, a, 1, val(10)); d != Store {
		t.Fatalf("a key back in the ghost list was forgotten with its old slot: %v", d)
	}
}

// TestTransientGhostListFollowsTheMainCache: the ghost list remembers as
// many keys as the main cache behind the tier holds values (S3-FIFO's
// ghost queue), not the few the tier itself holds, so a key read again
// long after its value left the small tier, but before the main cache
// would have evicted it, is stored on its next fetch.
func TestTransientGhostListFollowsTheMainCache(t *testing.T) {
	const tierValues, mainValues = 4, 4 * minGhosts
	size := ghostUnit - transientOverhead - 8
	tr := NewTransient(tierValues*ghostUnit, mainValues*ghostUnit)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%07d", i) }
	n := mainValues - tierValues // every value but the newest leaves unread
	for i := range n {
		if d := offer(tr, key(i), 1, val(size)); d != Hold {
			t.Fatalf("first fetch of %s: %v, want hold", key(i), d)
		}
	}
	if g := int(tr.Stats().Ghosts); g > mainValues || g < n-tierValues {
		t.Fatalf("%d ghost keys after %d values left the tier (main cache: %d values)", g, n-tierValues, mainValues)
	}
	if d := offer(tr, key(0), 1, val(size)); d != Store {
		t.Fatalf("the first key, fetched again: %v, want store (its ghost was forgotten)", d)
	}
	// Beyond the bound the oldest ghosts go.
	for i := range mainValues + tierValues {
		offer(tr, key(n+i), 1, val(size))
	}
	if d := offer(tr, key(1), 1, val(size)); d != Hold {
		t.Fatalf("a key older than the main cache's span: %v, want hold", d)
	}
	if g := tr.Stats().Ghosts; g != mainValues {
		t.Fatalf("%d ghost keys, want the bound %d", g, mainValues)
	}
	if b := ghostBound(1 << 40); b != maxGhosts {
		t.Fatalf("ghost bound of a 1 TiB cache: %d keys, want %d", b, maxGhosts)
	}
}

// offer is Offer without the eviction count.
func offer(tr *Transient, key []byte, index uint64, value []byte) Decision {
	d, _ := tr.Offer(key, index, value)
	return d
}

func TestTransientCountsEvictions(t *testing.T) {
	tr := NewTransient(2*(100+transientOverhead+1), 0)
	total := 0
	for _, k := range []string{"a", "b", "c", "d"} {
		_, n := tr.Offer([]byte(k), 1, val(100))
		total += n
	}
	if total != 2 || tr.Stats().Evicted != 2 {
		t.Fatalf("%d evictions reported, stats %+v; want 2", total, tr.Stats())
	}
}

// TestTransientPrefetchIsNotARead: a prefetched value is held and served
// only for its version; prefetching a held version again, or a key the
// ghost list remembers, stores nothing; a later version replaces an
// earlier one; a tier without budget or too small holds nothing.
func TestTransientPrefetchIsNotARead(t *testing.T) {
	tr := NewTransient(4*(100+transientOverhead+1), 0)
	if held, _ := tr.Prefetch([]byte("a"), 5, val(100)); !held {
		t.Fatal("first prefetch not held")
	}
	if held, _ := tr.Prefetch([]byte("a"), 5, val(100)); held {
		t.Fatal("the same version held twice")
	}
	if st := tr.Stats(); st.Values != 1 || st.Taken != 0 || st.Prefetched != 1 {
		t.Fatalf("stats %+v: want 1 value held, none taken", st)
	}
	if _, ok := tr.Take([]byte("a"), 6); ok {
		t.Fatal("version 6 served from a prefetch of version 5")
	}
	// Take dropped the held version 5 (the key changed).
	if held, _ := tr.Prefetch([]byte("a"), 5, val(100)); !held {
		t.Fatal("prefetch after the drop not held")
	}
	if held, _ := tr.Prefetch([]byte("a"), 7, []byte("seven")); !held {
		t.Fatal("a later version not held")
	}
	if _, ok := tr.Take([]byte("a"), 5); ok {
		t.Fatal("the replaced version 5 served")
	}
	tr.Prefetch([]byte("a"), 7, []byte("seven"))
	if v, ok := tr.Take([]byte("a"), 7); !ok || string(v) != "seven" {
		t.Fatalf("version 7: %q, %v", v, ok)
	}
	// A ghost key stays a ghost: its next fetch still stores at once.
	if d := offer(tr, []byte("g"), 1, val(100)); d != Hold {
		t.Fatalf("g: %v", d)
	}
	for i := range 8 {
		tr.Prefetch([]byte(fmt.Sprintf("p%d", i)), 1, val(100))
	}
	if held, _ := tr.Prefetch([]byte("g"), 2, val(100)); !held {
		t.Fatal("prefetch of a ghost key not held")
	}
	if d := offer(tr, []byte("g"), 2, val(100)); d != Store {
		t.Fatalf("fetch of a held, prefetched version: %v, want store", d)
	}
	if held, _ := tr.Prefetch([]byte("big"), 1, val(10000)); held {
		t.Fatal("a value larger than the tier held")
	}
	if held, _ := NewTransient(0, 0).Prefetch([]byte("a"), 1, val(1)); held {
		t.Fatal("a tier without budget held a value")
	}
}
