package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// BenchmarkProxy measures a proxy store's read paths and its keeper's
// CLOCK sweep, on 20,000 keys of 100 bytes applied from a root in entries
// of 1,000 keys (no read cache, so every read goes through the proxy's
// records):
//
//	go test -run XXX -bench Proxy -benchtime 2s ./internal/store/
//
// lookup-stored reads values the proxy holds (a window over the whole
// log); lookup-fetched values it does not hold (a window of one entry, no
// budget), fetched from the root in the same process. sweep-remote is one
// round of the hand over records that are all remote or in the window
// (nothing to give up: a whole turn); sweep-victims one round over stored
// values outside the window, not read since the last round (it gives up
// cache.MaxVictims of them).
func BenchmarkProxy(b *testing.B) {
	const n, per = 20_000, 1_000
	root, err := Open(Options{Dir: b.TempDir(), MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	val := make([]byte, 100)
	keys := make([][]byte, n)
	for i := 0; i < n; i += per {
		ops := make([]wal.Op, per)
		for j := range ops {
			keys[i+j] = fmt.Appendf(nil, "k%06d", i+j)
			ops[j] = wal.Op{Type: wal.OpSet, Key: keys[i+j], Value: val}
		}
		if _, err := root.Write(context.Background(), Batch{Ops: ops}); err != nil {
			b.Fatal(err)
		}
	}
	open := func(po ProxyOptions) *Store {
		px, err := Open(Options{Dir: b.TempDir(), DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1,
			ReadCacheBytes: -1, Proxy: &po, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		px.SetFetcher(&storeFetcher{src: root})
		es, err := root.ReadLog(1, int(root.AppliedIndex()), 1<<30)
		if err != nil {
			b.Fatal(err)
		}
		if err := px.Apply(context.Background(), es); err != nil {
			b.Fatal(err)
		}
		px.db.Flush()
		return px
	}
	found := func(uint64, int, []byte, uint64, bool) error { return nil }
	lookups := func(px *Store, per int) func(b *testing.B) {
		return func(b *testing.B) {
			reportCPU(b)
			for i := 0; b.Loop(); i++ {
				start := (i * per * 7919) % (n - per)
				if _, err := px.Lookup(keys[start:start+per], found); err != nil {
					b.Fatal(err)
				}
			}
		}
	}

	all := open(ProxyOptions{Window: 10_000, CacheBytes: 1 << 30})
	defer all.Close()
	b.Run("lookup-stored/1-keys", lookups(all, 1))
	b.Run("lookup-stored/100-keys", lookups(all, 100))

	remote := open(ProxyOptions{Window: 1, CacheBytes: -1})
	defer remote.Close()
	b.Run("lookup-fetched/1-keys", lookups(remote, 1))

	// A budget and free-space limits the keeper never sweeps for: the
	// rounds measured are the only ones.
	idle := open(ProxyOptions{Window: 1, CacheBytes: 1 << 30, SoftFreeBytes: 1, HardFreeBytes: 1})
	defer idle.Close()
	b.Run("sweep-remote", func(b *testing.B) {
		reportCPU(b)
		for b.Loop() {
			if victims, _, cycled := idle.sweep(cache.Hand{}, 1<<40); len(victims) != 0 || !cycled {
				b.Fatalf("%d victims, cycled %v: want none, a whole turn", len(victims), cycled)
			}
		}
	})
	// Read every value once: fetched, then admitted (the queue holds
	// 1024, so in batches).
	for i := 0; i < n; i += per {
		if _, err := idle.Lookup(keys[i:i+per], found); err != nil {
			b.Fatal(err)
		}
		want := float64(min(i+per, n-per)) // the last entry's values are stored

		deadline := time.Now().Add(time.Minute)
		for idle.Metrics().ProxyAdmissions["admitted"] < want {
			if time.Now().After(deadline) {
				b.Fatalf("%v of %v values admitted", idle.Metrics().ProxyAdmissions["admitted"], want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	idle.sweep(cache.Hand{}, 1<<40) // clears the reference bits the reads set
	b.Run("sweep-victims", func(b *testing.B) {
		reportCPU(b)
		for b.Loop() {
			if victims, _, _ := idle.sweep(cache.Hand{}, 1<<40); len(victims) != cache.MaxVictims {
				b.Fatalf("%d victims, want %d", len(victims), cache.MaxVictims)
			}
		}
	})
}
