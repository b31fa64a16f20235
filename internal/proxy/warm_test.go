package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// TestShardWarmupServesFirstReadsFromL2: four proxies whose L1 keeps
// only their window, each with a shard warmer. Without any read, each
// owner fills its shard budget from the replicas; then every proxy reads
// every key, none read before anywhere in the data centre, without a
// single request to the replicas: its own shard from its budget, the
// others as L2 hits.
func TestShardWarmupServesFirstReadsFromL2(t *testing.T) {
	c := newCluster(t)
	root, m, ps, nodes := c.l2DataCentre(4)
	keys := writeEvicted(t, root, nodes, "key", 400)
	for _, p := range ps {
		w, err := StartShardWarmer(WarmConfig{Database: c.name, Store: p.st, Next: p.l3, Rate: 100_000, Batch: 32, Interval: time.Hour, Metrics: c.metrics}, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
	}
	var l3 int64
	for _, p := range ps {
		own := len(ownKeys(m, p.name, keys))
		waitFor(t, p.name+"'s shard budget warmed", func() bool { return p.st.ProxyStats().ShardValues >= int64(own) })
		l3 += p.l3.keys.Load()
	}
	// The keys, and the padding keys beyond the window (10 written, 5 in
	// it): each once, by its owner.
	if l3 < int64(len(keys)) || l3 > int64(len(keys)+10) {
		t.Fatalf("the warm-up fetched %d values, want %d to %d (each remote key once, by its owner)", l3, len(keys), len(keys)+10)
	}
	for _, p := range ps {
		readChecked(t, p.node, keys)
	}
	var after, hits int64
	for _, p := range ps {
		after += p.l3.keys.Load()
		hits += p.l2.Hits()
	}
	if after != l3 {
		t.Fatalf("first reads fetched %d values from the replicas, want 0", after-l3)
	}
	if want := int64(3 * len(keys)); hits != want {
		t.Fatalf("L2 hits %d, want %d", hits, want)
	}
	if got := valueIn(t, c.metrics, "qs_proxy_shard_warm_total", map[string]string{"db": c.name, "result": "held"}); got < float64(len(keys)) {
		t.Fatalf("shard_warm_total{held} = %v, want at least %d", got, len(keys))
	}
}

// fakeWarmStore is a shard of keys k0000.. with a budget of room values.
type fakeWarmStore struct {
	mu    sync.Mutex
	keys  int
	room  int
	held  map[string][]byte
	bad   int
	calls int
}

func (f *fakeWarmStore) ShardWarmItems(from []byte, n, scan int) ([]store.FetchItem, uint64, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	var items []store.FetchItem
	i := 0
	if from != nil {
		fmt.Sscanf(string(from), "k%04d", &i)
	}
	for seen := 0; i < f.keys; i++ {
		k := fmt.Sprintf("k%04d", i)
		if seen == scan || len(items) == n {
			return items, 7, []byte(k), nil
		}
		seen++
		if _, ok := f.held[k]; !ok {
			items = append(items, store.FetchItem{Key: []byte(k), Index: 7, Len: 5})
		}
	}
	return items, 7, nil, nil
}

func (f *fakeWarmStore) PutShardWarm(items []store.FetchItem) (held, bad int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range items {
		if len(it.Value) != it.Len {
			f.bad++
			bad++
			continue
		}
		f.held[string(it.Key)] = it.Value
		held++
	}
	return held, bad
}

func (f *fakeWarmStore) ShardRoom() (int64, int64, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.held)) * warmValueGuess, int64(f.room) * warmValueGuess, int64(len(f.held))
}

func (f *fakeWarmStore) state() (held, bad, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held), f.bad, f.calls
}

// fakeFetcher answers every key with value, or fails the first fails
// fetches.
type fakeFetcher struct {
	mu    sync.Mutex
	value string
	fails int
	asked int
}

func (f *fakeFetcher) Fetch(_ context.Context, _ uint64, items []store.FetchItem) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return errors.New("replicas unreachable")
	}
	for i := range items {
		items[i].Value = []byte(f.value)
		f.asked++
	}
	return nil
}

// TestShardWarmerBounds: a warmer stops at a full budget (the keys past
// it are never fetched), retries a failed fetch, and holds no value that
// does not match its record.
func TestShardWarmerBounds(t *testing.T) {
	t.Run("full budget", func(t *testing.T) {
		s := &fakeWarmStore{keys: 1000, room: 100, held: map[string][]byte{}}
		f := &fakeFetcher{value: "value"}
		m := NewMetrics()
		w, err := StartShardWarmer(WarmConfig{Database: "warm", Store: s, Next: f, Rate: 1_000_000, Batch: 30, Interval: time.Hour, Metrics: m}, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a full pass", func() bool {
			return valueIn(t, m, "qs_proxy_shard_warm_total", map[string]string{"db": "warm", "result": "full"}) >= 1
		})
		w.Close()
		if held, _, _ := s.state(); held != 100 || f.asked != 100 {
			t.Fatalf("held %d, fetched %d: want the budget's 100", held, f.asked)
		}
	})
	t.Run("failed fetch and bad values", func(t *testing.T) {
		s := &fakeWarmStore{keys: 50, room: 1000, held: map[string][]byte{}}
		f := &fakeFetcher{value: "not five bytes", fails: 2}
		m := NewMetrics()
		w, err := StartShardWarmer(WarmConfig{Database: "warmbad", Store: s, Next: f, Rate: 1_000_000, Batch: 10, Interval: time.Hour, Retry: time.Millisecond, Metrics: m}, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a pass done", func() bool {
			return valueIn(t, m, "qs_proxy_shard_warm_total", map[string]string{"db": "warmbad", "result": "done"}) >= 1
		})
		w.Close()
		held, bad, _ := s.state()
		if held != 0 || bad != 50 {
			t.Fatalf("held %d, bad %d: want 0 and 50", held, bad)
		}
		if got := valueIn(t, m, "qs_proxy_shard_warm_total", map[string]string{"db": "warmbad", "result": "failed"}); got != 20 {
			t.Fatalf("failed %v, want 20 (two fetches of 10)", got)
		}
		if got := valueIn(t, m, "qs_proxy_shard_warm_total", map[string]string{"db": "warmbad", "result": "bad"}); got != 50 {
			t.Fatalf("bad %v, want 50", got)
		}
	})
	t.Run("waits until caught up", func(t *testing.T) {
		s := &fakeWarmStore{keys: 10, room: 100, held: map[string][]byte{}}
		var ready atomic.Bool
		polls := make(chan struct{}, 1000)
		w, err := StartShardWarmer(WarmConfig{Database: "warmready", Store: s, Next: &fakeFetcher{value: "value"}, Interval: time.Hour,
			Poll: time.Millisecond, Ready: func() bool {
				select {
				case polls <- struct{}{}:
				default:
				}
				return ready.Load()
			}}, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for range 5 {
			<-polls
		}
		if _, _, calls := s.state(); calls != 0 {
			t.Fatalf("%d passes before the store caught up", calls)
		}
		ready.Store(true)
		waitFor(t, "the pass once caught up", func() bool { held, _, _ := s.state(); return held == 10 })
	})
	t.Run("bad config", func(t *testing.T) {
		for _, cfg := range []WarmConfig{{}, {Store: &fakeWarmStore{}}, {Store: &fakeWarmStore{}, Next: &fakeFetcher{}, Rate: -1}} {
			if w, err := StartShardWarmer(cfg, testLogger()); err == nil {
				w.Close()
				t.Errorf("%+v: started", cfg)
			}
		}
	})
}

func TestWarmBatchAndPause(t *testing.T) {
	for _, c := range []struct {
		held, budget, values int64
		want                 int
	}{
		{0, 0, 0, 0},
		{0, 100 * warmValueGuess, 0, 100},
		{99 * warmValueGuess, 100 * warmValueGuess, 99, 1},
		{100*warmValueGuess - 1, 100 * warmValueGuess, 100, 0},
		{200 * warmValueGuess, 100 * warmValueGuess, 200, 0},
		// Values of 2,000 bytes held: the room counts in those.
		{10 * 2000, 30 * 2000, 10, 20},
		{29*2000 + 1, 30 * 2000, 29, 0},
	} {
		if got := warmBatch(c.held, c.budget, c.values); got != c.want {
			t.Errorf("warmBatch(%d, %d, %d) = %d, want %d", c.held, c.budget, c.values, got, c.want)
		}
	}
	if d := warmPause(500, 1000); d != 500*time.Millisecond {
		t.Errorf("500 values at 1000/s: %v", d)
	}
	if warmPause(0, 1000) != 0 || warmPause(10, 0) != 0 {
		t.Error("no pause without values or rate")
	}
}

// TestShardWarmupIsNotPrefetched: a relay, a proxy that warms its shard
// budget through it, and another proxy subscribed to the relay's
// prefetch stream. The warm-up's fetches are quiet: the other proxy
// receives none of its values, while a value the warming proxy reads
// afterwards reaches it (after the warm-up's, had they been published:
// a subscriber gets the relay's values in the order it published them).
func TestShardWarmupIsNotPrefetched(t *testing.T) {
	c := newCluster(t)
	root := c.root()
	dbid := root.st.DBID()
	replica := c.replica(dbid, root.addr)
	relay := c.relayProxy(dbid, store.ProxyOptions{Window: 5, CacheBytes: -1, TransientBytes: 1 << 20, EvictInterval: 2 * time.Millisecond},
		Config{Replicas: []string{replica.addr}}, root.addr)
	m, _ := cache.NewShardMap(2)
	name := shardNames(t, m, 1)[0]
	warming := c.proxy(dbid, store.ProxyOptions{Window: 5, CacheBytes: -1, ShardCacheBytes: 8 << 20, Shards: m, NodeName: name, EvictInterval: 2 * time.Millisecond},
		Config{Replicas: []string{relay.addr}}, root.addr)
	other := c.proxy(dbid, store.ProxyOptions{Window: 5, CacheBytes: -1, TransientBytes: 1 << 20, EvictInterval: 2 * time.Millisecond},
		Config{Replicas: []string{relay.addr}}, root.addr)
	sub := repl.StartPrefetch(repl.PrefetchConfig{Database: c.name, DBID: dbid, ProcessID: other.pid, Relays: []string{relay.addr},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Metrics: c.replMetrics}, other.st, testLogger())
	t.Cleanup(sub.Close)
	keys := writeEvicted(t, root, []*node{relay, warming, other}, "key", 200)
	own := ownKeys(m, name, keys)
	var reads []string // keys of the other shard, which the warm-up leaves alone
	for _, k := range keys {
		if !m.Owns(name, []byte(k)) {
			reads = append(reads, k)
		}
	}
	if len(own) == 0 || len(reads) == 0 {
		t.Fatalf("%d keys of the warming proxy's shard, %d of the other: want both", len(own), len(reads))
	}
	// The relay publishes to a subscriber from the moment it registers it
	// (no other test of the package subscribes).
	waitFor(t, "the other proxy subscribed", func() bool { return c.replValue("qs_repl_prefetch_subscribers") >= 1 })
	if n := sub.Stats().Received; n != 0 {
		t.Fatalf("the other proxy received %d values before any read", n)
	}
	quiet0 := c.replValue("qs_repl_fetch_quiet_total")

	w, err := StartShardWarmer(WarmConfig{Database: c.name, Store: warming.st, Next: warming.pool.Quiet(), Rate: 100_000, Batch: 32, Interval: time.Hour, Metrics: c.metrics}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	waitFor(t, "the shard budget warmed", func() bool { return warming.st.ProxyStats().ShardValues >= int64(len(own)) })
	if n := c.replValue("qs_repl_fetch_quiet_total") - quiet0; n == 0 {
		t.Fatal("the relay answered no quiet fetch: the warm-up did not go through it")
	}
	readChecked(t, warming, reads[:1])
	waitFor(t, "the read's value at the other proxy", func() bool { return sub.Stats().Received > 0 })
	if got := sub.Stats().Received; got != 1 {
		t.Fatalf("the other proxy received %d values after the warm-up of %d and one read, want 1 (the read's)", got, len(own))
	}
}
