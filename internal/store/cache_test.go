package store

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

type lookupRead struct {
	applied uint64
	keys    []string
	found   []bool
	values  []string
	indexes []uint64
}

// TestLookupConsistentUnderWrites is the read cache's checker: writers
// set, overwrite, rewrite (no-ops) and delete a small hot keyspace while
// readers look up random key sets; every read is checked against the
// state the log gives at the index the read reported, every multi-key
// read against one index, and each reader's indexes must never go back.
// It runs without a cache, with one too small for the keyspace (constant
// eviction and refused inserts) and with a large one.
func TestLookupConsistentUnderWrites(t *testing.T) {
	t.Parallel()
	for _, budget := range []int64{-1, 3 << 10, 64 << 20} {
		t.Run(fmt.Sprint("cache ", budget), func(t *testing.T) {
			s := openTest(t, Options{ReadCacheBytes: budget})
			const nkeys = 12
			key := func(i int) string { return fmt.Sprintf("k%02d", i) }
			// Writers run for 1.5 s and at least 200 batches each (at most
			// 15 s, for slow race-detector runs); readers until they stop.
			deadline, hardStop := time.Now().Add(1500*time.Millisecond), time.Now().Add(15*time.Second)
			writersDone := make(chan struct{})
			var wwg, wg sync.WaitGroup
			for w := range 2 {
				wwg.Add(1)
				go func() {
					defer wwg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 1))
					for i := 0; (i < 200 || time.Now().Before(deadline)) && time.Now().Before(hardStop); i++ {
						var ops []wal.Op
						for range 1 + r.IntN(3) {
							k := key(r.IntN(nkeys))
							if r.IntN(4) == 0 {
								ops = append(ops, del(k))
							} else {
								ops = append(ops, set(k, fmt.Sprint("v", r.IntN(5)))) // often a rewrite
							}
						}
						if _, err := s.Write(context.Background(), Batch{Ops: ops}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			go func() { wwg.Wait(); close(writersDone) }()
			var mu sync.Mutex
			var reads []lookupRead
			for rd := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(rd), 2))
					var last uint64
					var mine []lookupRead
					for stop := false; !stop; {
						select {
						case <-writersDone:
							stop = true
						default:
						}
						var rr lookupRead
						var ks [][]byte
						for range 1 + r.IntN(4) {
							k := key(r.IntN(nkeys))
							rr.keys = append(rr.keys, k)
							ks = append(ks, []byte(k))
						}
						a, err := s.Lookup(ks, func(_ uint64, i int, v []byte, idx uint64, found bool) error {
							rr.found = append(rr.found, found)
							rr.values = append(rr.values, string(v))
							rr.indexes = append(rr.indexes, idx)
							return nil
						})
						if err != nil {
							t.Error(err)
							return
						}
						if a < last {
							t.Errorf("reader's index went back from %d to %d", last, a)
							return
						}
						last, rr.applied = a, a
						mine = append(mine, rr)
					}
					mu.Lock()
					reads = append(reads, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			// Replay the log and check every read at its index.
			entries, err := s.ReadLog(1, 1<<30, 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			sort.Slice(reads, func(i, j int) bool { return reads[i].applied < reads[j].applied })
			type kv struct {
				value string
				index uint64
			}
			state := map[string]kv{}
			next := 0
			for _, rr := range reads {
				for next < len(entries) && entries[next].Index <= rr.applied {
					e := entries[next]
					for _, op := range e.Ops {
						if op.Type == wal.OpSet {
							state[string(op.Key)] = kv{string(op.Value), e.Index}
						} else {
							delete(state, string(op.Key))
						}
					}
					next++
				}
				for i, k := range rr.keys {
					want, ok := state[k]
					if rr.found[i] != ok || (ok && (rr.values[i] != want.value || rr.indexes[i] != want.index)) {
						t.Fatalf("read at %d of %s: got found=%v %q@%d, the log says found=%v %q@%d",
							rr.applied, k, rr.found[i], rr.values[i], rr.indexes[i], ok, want.value, want.index)
					}
				}
			}
			hits, misses := s.Metrics().ReadCacheHits, s.Metrics().ReadCacheMisses
			t.Logf("%d reads over %d entries checked; cache hits %v, misses %v, refused %v, evictions %v",
				len(reads), len(entries), hits, misses, s.Metrics().ReadCacheRefused, s.Metrics().ReadCacheEvictions)
			if len(reads) < 1000 || len(entries) < 50 {
				t.Fatalf("too little traffic to check anything: %d reads, %d entries", len(reads), len(entries))
			}
			if budget > 1<<20 && hits == 0 {
				t.Fatal("the cache never answered")
			}
		})
	}
}

// After a snapshot replaces the database, nothing cached from the old one
// is served.
func TestLookupAfterReplace(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{})
	mustWrite(t, root, set("k", "old"))
	dir := filepath.Join(t.TempDir(), "replica")
	rep := openTest(t, Options{Dir: dir, DBID: root.DBID()})
	replicate(t, root, rep, 10)
	look := func() (string, uint64) {
		var got string
		a, err := rep.Lookup([][]byte{[]byte("k")}, func(_ uint64, _ int, v []byte, _ uint64, _ bool) error { got = string(v); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return got, a
	}
	look()
	if v, _ := look(); v != "old" || rep.Metrics().ReadCacheHits == 0 {
		t.Fatalf("before: %q, hits %v", v, rep.Metrics().ReadCacheHits)
	}
	mustWrite(t, root, set("k", "new"))
	cp := filepath.Join(t.TempDir(), "cp")
	if _, err := root.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	copyDir(t, cp, ReadyDir(dir))
	if err := rep.Replace(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, a := look(); v != "new" || a != root.AppliedIndex() {
		t.Fatalf("after replace: %q at %d", v, a)
	}
}

// The shard table under random inserts, replacements and deletions, with
// hashes drawn from a tiny range so that probe runs collide, wrap around
// the end of the table and get cut by deletions: after every step each
// entry the model holds is found at a slot its probe reaches, and nothing
// else is held.
func TestCacheShardTable(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 3))
		var s cacheShard
		type kv struct {
			hash  uint64
			value string
		}
		model := map[string]kv{}
		hashSpace := uint64(1 + r.IntN(40))
		for step := range 3000 {
			k := fmt.Sprintf("k%d", r.IntN(60))
			_, have := model[k]
			switch op := r.IntN(10); {
			case op < 6: // insert or replace
				h := r.Uint64N(hashSpace) | 7<<58 // shard bits are irrelevant here
				if have {
					h = model[k].hash
				}
				v := fmt.Sprint("v", step)
				e := newCacheEntry([]byte(k), Item{Value: []byte(v), Index: uint64(step)}, uint64(step), true)
				if i, old := findLocked(&s, k, h); old != nil {
					s.bytes += e.size() - old.size()
					s.slots[i].entry = e
				} else {
					s.insertLocked(h, e)
				}
				model[k] = kv{h, v}
			case op < 9 && have: // delete
				i, e := findLocked(&s, k, model[k].hash)
				if e == nil {
					t.Fatalf("seed %d step %d: %s not found before delete", seed, step, k)
				}
				s.bytes -= e.size()
				s.deleteLocked(i)
				delete(model, k)
			default: // evict one
				if s.n > 0 {
					var keep uint64 = 1 << 63 // no entry has it
					before := s.n
					if !s.evictOneLocked(keep) || s.n != before-1 {
						t.Fatalf("seed %d step %d: eviction failed with %d entries", seed, step, before)
					}
					for k := range model {
						if _, e := findLocked(&s, k, model[k].hash); e == nil {
							delete(model, k)
						}
					}
				}
			}
			checkShard(t, &s, len(model), func(key string) (uint64, string, bool) {
				m, ok := model[key]
				return m.hash, m.value, ok
			})
			for k, m := range model {
				if _, e := findLocked(&s, k, m.hash); e == nil || string(e.value()) != m.value {
					t.Fatalf("seed %d step %d: %s: got %v, want %q", seed, step, k, e, m.value)
				}
			}
		}
	}
}

// checkShard checks the counters of s and that every held entry is one
// the model has and is reachable by a probe from its home slot.
func checkShard(t *testing.T, s *cacheShard, want int, model func(key string) (uint64, string, bool)) {
	t.Helper()
	n, bytes := 0, int64(0)
	for i, sl := range s.slots {
		if sl.entry == nil {
			continue
		}
		n++
		bytes += sl.entry.size()
		h, v, ok := model(string(sl.entry.key()))
		if !ok || h != sl.hash || v != string(sl.entry.value()) {
			t.Fatalf("slot %d holds %q=%q (hash %d), the model says %v %q (hash %d)", i, sl.entry.key(), sl.entry.value(), sl.hash, ok, v, h)
		}
		if j, _ := findLocked(s, sl.entry.key(), sl.hash); j != i {
			t.Fatalf("entry %q at slot %d is found at %d", sl.entry.key(), i, j)
		}
	}
	if n != want || n != s.n || bytes != s.bytes {
		t.Fatalf("%d entries held, %d counted, %d in the model; %d bytes held, %d counted", n, s.n, want, bytes, s.bytes)
	}
	if len(s.slots) > 0 && s.n*4 > len(s.slots)*3 {
		t.Fatalf("%d entries in %d slots", s.n, len(s.slots))
	}
}

// The cache keeps to its budget, answers what it holds, and never holds a
// value other than the last one put.
func TestReadCacheBudget(t *testing.T) {
	t.Parallel()
	m := newStoreMetrics()
	c := newReadCache(cacheShards*4096, m)
	want := map[string]string{}
	for i := range 20000 {
		k := fmt.Sprintf("key-%d", i%5000)
		v := fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i%200))
		c.put([]byte(k), Item{Value: []byte(v), Index: uint64(i + 1), Flags: uint32(i), Expires: int64(i)}, true, uint64(i+1))
		want[k] = v
		if i%1000 == 0 {
			c.invalidate(map[string]*keyState{k: nil}, uint64(i+1))
			delete(want, k)
		}
	}
	n, bytes := c.size()
	if bytes > cacheShards*(4096+int64(entryHeader+200+32+entryOverhead)) {
		t.Errorf("%d bytes held, budget %d", bytes, cacheShards*4096)
	}
	held := 0
	for k, v := range want {
		it, found, ok := c.get([]byte(k), 1<<62)
		if !ok {
			continue
		}
		got := it.Value
		if it.Flags != uint32(it.Index-1) || it.Expires != int64(it.Index-1) {
			t.Fatalf("key %s: flags %d with index %d", k, it.Flags, it.Index)
		}
		held++
		if !found || string(got) != v {
			t.Fatalf("%s: got %q found=%v, want %q", k, got, found, v)
		}
	}
	if held != n || n == 0 || m.cacheEvictions.value() == 0 {
		t.Errorf("%d entries held, %d answered, %v evictions", n, held, m.cacheEvictions.value())
	}
	for i := range c.shards {
		checkShard(t, &c.shards[i], c.shards[i].n, func(key string) (uint64, string, bool) {
			v, ok := want[key]
			return maphash.String(c.seed, key), v, ok
		})
	}
}
