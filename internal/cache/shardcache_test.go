package cache

import (
	"fmt"
	"testing"
)

func TestShardCacheExactVersionOnly(t *testing.T) {
	c := NewShardCache(1 << 20)
	if held, _ := c.Put([]byte("k"), 5, []byte("five")); !held {
		t.Fatal("version 5 not held")
	}
	if v, r := c.Get([]byte("k"), 5); r != ShardHit || string(v) != "five" {
		t.Fatalf("Get(5) = %q, %v", v, r)
	}
	// The asker's record is newer, or older, than the version held: a miss.
	for _, idx := range []uint64{4, 6} {
		if v, r := c.Get([]byte("k"), idx); r != ShardOther || v != nil {
			t.Fatalf("Get(%d) = %q, %v; want other_version", idx, v, r)
		}
	}
	if _, r := c.Get([]byte("x"), 5); r != ShardAbsent {
		t.Fatalf("Get of an absent key: %v", r)
	}
	// An older version never replaces a newer one; a newer one does.
	if held, _ := c.Put([]byte("k"), 3, []byte("three")); held {
		t.Fatal("older version 3 replaced version 5")
	}
	if held, _ := c.Put([]byte("k"), 7, []byte("seven")); !held {
		t.Fatal("newer version 7 not held")
	}
	if _, r := c.Get([]byte("k"), 5); r != ShardOther {
		t.Fatalf("replaced version 5: %v", r)
	}
	if v, r := c.Get([]byte("k"), 7); r != ShardHit || string(v) != "seven" {
		t.Fatalf("Get(7) = %q, %v", v, r)
	}
	st := c.Stats()
	if st.Values != 1 || st.Gets[ShardHit] != 2 || st.Gets[ShardOther] != 3 || st.Gets[ShardAbsent] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestShardCacheBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	size := (&shardEntry{key: "k00", value: make([]byte, 100)}).size()
	c := NewShardCache(3 * size)
	for i := range 3 {
		c.Put([]byte(fmt.Sprintf("k%02d", i)), 1, make([]byte, 100))
	}
	c.Get([]byte("k00"), 1) // k01 is now the least recently used
	if _, ev := c.Put([]byte("k03"), 1, make([]byte, 100)); ev != 1 {
		t.Fatalf("%d evicted, want 1", ev)
	}
	if _, r := c.Get([]byte("k01"), 1); r != ShardAbsent {
		t.Fatalf("k01 should have left first: %v", r)
	}
	for _, k := range []string{"k00", "k02", "k03"} {
		if _, r := c.Get([]byte(k), 1); r != ShardHit {
			t.Fatalf("%s: %v", k, r)
		}
	}
	if st := c.Stats(); st.Bytes > st.Budget || st.Values != 3 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	if held, _ := c.Put([]byte("big"), 1, make([]byte, 4*size)); held {
		t.Fatal("a value larger than the budget was held")
	}
}

func TestShardCacheRefusesChangedValue(t *testing.T) {
	c := NewShardCache(1 << 20)
	v := []byte("value")
	c.Put([]byte("k"), 1, v)
	v[0] = 'X' // memory changed under the cache
	if got, r := c.Get([]byte("k"), 1); r != ShardCorrupt || got != nil {
		t.Fatalf("Get of a changed value = %q, %v", got, r)
	}
	if _, r := c.Get([]byte("k"), 1); r != ShardAbsent {
		t.Fatalf("a corrupt value stayed: %v", r)
	}
	if st := c.Stats(); st.Gets[ShardCorrupt] != 1 || st.Values != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestShardCacheWithoutBudgetHoldsNothing(t *testing.T) {
	c := NewShardCache(0)
	if held, _ := c.Put([]byte("k"), 1, []byte("v")); held || c.Enabled() {
		t.Fatal("a cache without budget held a value")
	}
	if _, r := c.Get([]byte("k"), 1); r != ShardAbsent {
		t.Fatal(r)
	}
	c = NewShardCache(1 << 20)
	if held, _ := c.Put([]byte("k"), 0, []byte("v")); held {
		t.Fatal("version 0 held")
	}
	c.Put([]byte("k"), 2, []byte("v"))
	c.Drop([]byte("k"), 1) // another version: stays
	if _, r := c.Get([]byte("k"), 2); r != ShardHit {
		t.Fatal(r)
	}
	c.Drop([]byte("k"), 2)
	if _, r := c.Get([]byte("k"), 2); r != ShardAbsent {
		t.Fatal(r)
	}
}

// TestShardCacheHolds: Holds answers for the version held or an older
// one, without counting a Get or refreshing the key.
func TestShardCacheHolds(t *testing.T) {
	c := NewShardCache(1 << 20)
	if c.Holds([]byte("k"), 1) {
		t.Fatal("empty cache holds k")
	}
	c.Put([]byte("k"), 5, []byte("v5"))
	if !c.Holds([]byte("k"), 5) || !c.Holds([]byte("k"), 4) || c.Holds([]byte("k"), 6) {
		t.Fatal("Holds of versions 4, 5, 6 wrong")
	}
	if st := c.Stats(); st.Gets != [len(shardResultNames)]int64{} {
		t.Fatalf("Holds counted Gets: %+v", st.Gets)
	}
	if NewShardCache(0).Holds([]byte("k"), 1) {
		t.Fatal("a cache without budget holds k")
	}
}
