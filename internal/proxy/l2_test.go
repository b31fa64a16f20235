package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// countingFetcher counts the keys passed to the next tier.
type countingFetcher struct {
	next store.Fetcher
	keys atomic.Int64
}

func (f *countingFetcher) Fetch(ctx context.Context, asOf uint64, items []store.FetchItem) error {
	f.keys.Add(int64(len(items)))
	return f.next.Fetch(ctx, asOf, items)
}

// shardNames returns n node names owning distinct shards of m.
func shardNames(t *testing.T, m cache.ShardMap, n int) []string {
	t.Helper()
	seen := map[int]bool{}
	var names []string
	for i := 0; len(names) < n; i++ {
		if i > 100000 {
			t.Fatal("no node names for distinct shards")
		}
		name := fmt.Sprint("proxy-", i)
		if s := m.OfNode(name); !seen[s] {
			seen[s] = true
			names = append(names, name)
		}
	}
	return names
}

// l2Node is a proxy of a data centre with an L2 tier: its own shard
// budget, its L2 listener, and the replica behind its L3 counter.
type l2Node struct {
	*node
	name string
	l3   *countingFetcher
	l2   *L2
}

// l2Proxy opens a proxy named name whose L1 keeps only its window, with
// a shard budget, fetching from replica, and serves its L2 requests.
func (c *cluster) l2Proxy(dbid store.DBID, m cache.ShardMap, name, replica, upstream string) *l2Node {
	c.t.Helper()
	po := store.ProxyOptions{Window: 5, CacheBytes: -1, ShardCacheBytes: 8 << 20, Shards: m, NodeName: name, EvictInterval: 2 * time.Millisecond}
	n := &l2Node{node: &node{st: c.open(store.Options{DBID: dbid, ChunkBytes: 4096, Proxy: &po}), pid: repl.NewProcessID()}, name: name}
	c.serveNamed(n.node, name)
	p, err := New(Config{Database: c.name, DBID: dbid, ProcessID: n.pid, Replicas: []string{replica}, Metrics: c.metrics}, testLogger())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.Close)
	n.pool = p
	n.l3 = &countingFetcher{next: p}
	n.st.SetFetcher(n.l3) // until startL2
	c.follow(n.node, upstream)
	return n
}

// serveNamed starts the replication server of n as node name: it
// answers L2 requests.
func (c *cluster) serveNamed(n *node, name string) {
	c.t.Helper()
	srv, err := repl.NewServer(repl.ServerConfig{ProcessID: n.pid, NodeName: name, ProgressInterval: 50 * time.Millisecond},
		func(db string) (*store.Store, bool) { return n.st, db == n.st.Name() }, quiet)
	if err != nil {
		c.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	go srv.Serve(ln)
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
}

// dcPeers makes proxies (named names) the L2 cache of one data centre:
// each serves its L2 requests behind a link (added to cuts) and asks the
// others before its pool.
func (c *cluster) dcPeers(proxies []*node, m cache.ShardMap, names []string, cuts *[]*link) []*L2 {
	c.t.Helper()
	var peers []string
	for i, p := range proxies {
		c.serveNamed(p, names[i])
		l := newLink(c.t, p.addr, 0)
		*cuts = append(*cuts, l)
		peers = append(peers, l.Addr())
	}
	var out []*L2
	for i, p := range proxies {
		l, err := NewL2(L2Config{Database: c.name, DBID: p.st.DBID(), ProcessID: p.pid, Peers: peers, Shards: m, NodeName: names[i],
			Next: p.pool, Count: p.st.CountTier, AttemptTimeout: 300 * time.Millisecond, SidelineMin: 20 * time.Millisecond, SidelineMax: 200 * time.Millisecond,
			Metrics: c.metrics}, testLogger())
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(l.Close)
		p.st.SetFetcher(l)
		out = append(out, l)
	}
	return out
}

// l2DataCentre starts n proxies (l2Proxy) owning distinct shards of n,
// replicating from a new root through one replica, each with its L2 tier
// naming all of them (its own address too: recognized and skipped), and
// waits until each is connected to the others. It returns the root, the
// shard map, the proxies and their nodes.
func (c *cluster) l2DataCentre(n int) (root *node, m cache.ShardMap, ps []*l2Node, nodes []*node) {
	c.t.Helper()
	root = c.root()
	dbid := root.st.DBID()
	replica := c.replica(dbid, root.addr)
	m, _ = cache.NewShardMap(n)
	var addrs []string
	for _, name := range shardNames(c.t, m, n) {
		p := c.l2Proxy(dbid, m, name, replica.addr, root.addr)
		ps, nodes, addrs = append(ps, p), append(nodes, p.node), append(addrs, p.addr)
	}
	for _, p := range ps {
		c.startL2(p, m, 10*time.Second, addrs...)
	}
	for _, p := range ps {
		waitPeersUp(c.t, p.l2, n-1)
	}
	return root, m, ps, nodes
}

// ownKeys are the keys of keys that node name owns under m.
func ownKeys(m cache.ShardMap, name string, keys []string) []string {
	var own []string
	for _, k := range keys {
		if m.Owns(name, []byte(k)) {
			own = append(own, k)
		}
	}
	return own
}

// startL2 gives n its L2 tier over peers.
func (c *cluster) startL2(n *l2Node, m cache.ShardMap, attempt time.Duration, peers ...string) {
	c.t.Helper()
	l, err := NewL2(L2Config{Database: c.name, DBID: n.st.DBID(), ProcessID: n.pid, Peers: peers, Shards: m, NodeName: n.name,
		Next: n.l3, Count: n.st.CountTier, AttemptTimeout: attempt, SidelineMin: 20 * time.Millisecond, SidelineMax: 200 * time.Millisecond,
		Metrics: c.metrics}, testLogger())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(l.Close)
	n.l2 = l
	n.st.SetFetcher(l)
}

// writeEvicted writes keys prefix0000.. and pads the log until every
// proxy keeps only its window.
func writeEvicted(t *testing.T, root *node, nodes []*node, prefix string, n int) []string {
	t.Helper()
	var ops []wal.Op
	var keys []string
	for i := range n {
		k := fmt.Sprintf("%s%04d", prefix, i)
		keys = append(keys, k)
		ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte("value of " + k)})
	}
	for len(ops) > 0 { // batches within the store's limit on ops per batch
		b := ops[:min(len(ops), 5000)]
		ops = ops[len(b):]
		if _, err := root.st.Write(context.Background(), store.Batch{Ops: b}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		pad := []wal.Op{{Type: wal.OpSet, Key: []byte(fmt.Sprint("pad", i)), Value: []byte(prefix)}}
		if _, err := root.st.Write(context.Background(), store.Batch{Ops: pad}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		waitApplied(t, n.st, root.st.AppliedIndex())
		waitFor(t, n.st.Name()+"'s eviction down to its window", func() bool { return n.st.ProxyStats().CachedValues <= 5 })
	}
	return keys
}

// readChecked reads keys at n in one lookup and checks every value.
func readChecked(t *testing.T, n *node, keys []string) {
	t.Helper()
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = []byte(k)
	}
	if _, err := n.st.Lookup(bk, func(_ uint64, i int, v []byte, _ uint64, found bool) error {
		if !found || string(v) != "value of "+keys[i] {
			return fmt.Errorf("key %s: %q (found %v)", keys[i], v, found)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func waitPeersUp(t *testing.T, l *L2, want int) {
	t.Helper()
	waitFor(t, "L2 peers connected", func() bool {
		up := 0
		for _, p := range l.Status() {
			if p.Up {
				up++
			}
		}
		return up == want
	})
}

// TestL2ServesReadsInsideTheDataCentre: four proxies whose L1 keeps only
// their window read far more keys than that. Once each owner has read
// its shard's keys, every proxy reads every key without a single further
// request to the replicas: its own shard from its shard budget, the
// others from their owners (L2 hits).
func TestL2ServesReadsInsideTheDataCentre(t *testing.T) {
	c := newCluster(t)
	root, m, ps, nodes := c.l2DataCentre(4)
	keys := writeEvicted(t, root, nodes, "key", 400)
	for _, p := range ps {
		readChecked(t, p.node, ownKeys(m, p.name, keys))
	}
	var l3 int64
	for _, p := range ps {
		l3 += p.l3.keys.Load()
	}
	if l3 != int64(len(keys)) {
		t.Fatalf("warming the owners fetched %d values from the replicas, want %d", l3, len(keys))
	}
	for _, p := range ps {
		readChecked(t, p.node, keys)
	}
	var l3After, hits int64
	for _, p := range ps {
		l3After += p.l3.keys.Load()
		hits += p.l2.Hits()
	}
	if l3After != l3 {
		t.Fatalf("reads inside the data centre fetched %d values from the replicas", l3After-l3)
	}
	if want := int64(3 * len(keys)); hits != want {
		t.Fatalf("L2 hits %d, want %d (every key at the three proxies not owning it)", hits, want)
	}
	l2Hits := func(m store.Metrics) float64 { return m.ProxyTierLookups[store.TierResult{Tier: "l2", Result: "hit"}] }
	if got := c.storeSum(l2Hits); got != float64(hits) {
		t.Fatalf("proxy_tier_lookups_total{l2,hit} = %v, want %d", got, hits)
	}
	if s := ps[0].l2.Status(); len(s) != 4 || !s[0].Self || s[1].Name != ps[1].name || s[1].Shard != m.OfNode(ps[1].name) {
		t.Fatalf("L2 status %+v", s)
	}
}

// TestL2PeerDownOrStalledCostsOnlyLatency: the owner of one shard is
// stalled behind its link, another shard has no owner running, a third
// answers. Every read is answered right: the stalled owner's keys after
// its attempt timeout, from the replicas, then it is sidelined.
func TestL2PeerDownOrStalledCostsOnlyLatency(t *testing.T) {
	c := newCluster(t)
	root := c.root()
	dbid := root.st.DBID()
	replica := c.replica(dbid, root.addr)
	m, _ := cache.NewShardMap(4)
	names := shardNames(t, m, 4)
	asker := c.l2Proxy(dbid, m, names[0], replica.addr, root.addr)
	stalled := c.l2Proxy(dbid, m, names[1], replica.addr, root.addr)
	good := c.l2Proxy(dbid, m, names[2], replica.addr, root.addr)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	down.Close() // names[3]'s node is not running
	link := newLink(t, stalled.addr, 0)
	c.startL2(asker, m, 500*time.Millisecond, link.Addr(), good.addr, downAddr)
	waitPeersUp(t, asker.l2, 2)
	keys := writeEvicted(t, root, []*node{asker.node, stalled.node, good.node}, "key", 200)
	var ofStalled, ofGood []string
	for _, k := range keys {
		switch m.Of([]byte(k)) {
		case m.OfNode(names[1]):
			ofStalled = append(ofStalled, k)
		case m.OfNode(names[2]):
			ofGood = append(ofGood, k)
		}
	}
	readChecked(t, stalled.node, ofStalled)
	readChecked(t, good.node, ofGood)
	link.stall.Store(true)
	timeouts := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "timeout"})
	skipped := valueIn(t, c.metrics, "qs_proxy_l2_skipped_total", map[string]string{"db": c.name})
	readChecked(t, asker.node, keys)
	if got := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "timeout"}); got != timeouts+1 {
		t.Fatalf("l2_requests_total{timeout} %v → %v, want one timeout", timeouts, got)
	}
	if got := valueIn(t, c.metrics, "qs_proxy_l2_skipped_total", map[string]string{"db": c.name}); got <= skipped {
		t.Fatal("keys of the shard without a running owner were not counted as skipped")
	}
	if h := asker.l2.Hits(); h != int64(len(ofGood)) {
		t.Fatalf("L2 hits %d, want the %d keys of the owner that answers", h, len(ofGood))
	}
	// Sidelined: the next read does not wait on the stalled owner.
	readChecked(t, asker.node, keys)
	if got := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "timeout"}); got != timeouts+1 {
		t.Fatalf("a sidelined owner was asked again (%v timeouts)", got-timeouts)
	}
	link.stall.Store(false)
}

// fakeOwner serves L2 connections as node name, answering each request
// with answer.
func fakeOwner(t *testing.T, dbid store.DBID, name string, answer func(c net.Conn, f *repl.Fetch)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := repl.ReadMessage(c); err != nil {
					return
				}
				repl.WriteMessage(c, &repl.Welcome{Version: repl.FetchVersion, DBID: dbid})
				repl.WriteMessage(c, &repl.Node{Name: name})
				for {
					m, err := repl.ReadMessage(c)
					if err != nil {
						return
					}
					answer(c, m.(*repl.Fetch))
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestL2WrongAnswerIsAMissNeverServed: an owner answering another
// version (newer or older than the asking node's record), a value that
// does not match the record, or a malformed message: the reads are
// answered right from the replicas, and the answers counted.
func TestL2WrongAnswerIsAMissNeverServed(t *testing.T) {
	answers := map[string]func(c net.Conn, f *repl.Fetch){
		"newer": func(c net.Conn, f *repl.Fetch) { answerAll(c, f, 1, "value of a newer version") },
		"older": func(c net.Conn, f *repl.Fetch) { answerAll(c, f, -1, "value of an older version") },
		"wrong_value": func(c net.Conn, f *repl.Fetch) {
			answerAll(c, f, 0, "not the value")
		},
		"malformed": func(c net.Conn, f *repl.Fetch) {
			c.Write([]byte{byte(repl.MsgValues), 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0})
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			root := c.root()
			dbid := root.st.DBID()
			replica := c.replica(dbid, root.addr)
			m, _ := cache.NewShardMap(2)
			names := shardNames(t, m, 2)
			asker := c.l2Proxy(dbid, m, names[0], replica.addr, root.addr)
			c.startL2(asker, m, 10*time.Second, fakeOwner(t, dbid, names[1], answer))
			waitPeersUp(t, asker.l2, 1)
			keys := writeEvicted(t, root, []*node{asker.node}, "key", 50)
			bad := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "bad_answer"})
			errs := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "error"})
			readChecked(t, asker.node, keys)
			if asker.l2.Hits() != 0 {
				t.Fatalf("%d wrong answers used", asker.l2.Hits())
			}
			if asker.l3.keys.Load() != int64(len(keys)) {
				t.Fatalf("%d values from the replicas, want all %d", asker.l3.keys.Load(), len(keys))
			}
			gotBad := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "bad_answer"}) - bad
			gotErr := valueIn(t, c.metrics, "qs_proxy_l2_requests_total", map[string]string{"db": c.name, "result": "error"}) - errs
			if name == "malformed" && gotErr != 1 || name != "malformed" && gotBad != 1 {
				t.Fatalf("bad answers +%v, errors +%v", gotBad, gotErr)
			}
		})
	}
}

// answerAll answers every key FetchOK with version index+delta.
func answerAll(c net.Conn, f *repl.Fetch, delta int, value string) {
	ans := &repl.Values{ID: f.ID}
	for _, it := range f.Items {
		ans.Results = append(ans.Results, repl.FetchResult{Status: repl.FetchOK, Index: uint64(int64(it.Index) + int64(delta)), Value: []byte(value)})
	}
	repl.WriteMessage(c, ans)
}

// TestL2HitLatencyBenchmark (QS_BENCH=1) measures single-key reads at a
// proxy whose L1 holds none of the keys, each answered by the owner of
// the key's shard (an L2 hit) on loopback, and the same reads answered by
// the replica (L3, L2 off), in the same run. QS_BENCH_KEYS sets the keys
// (default 2000).
func TestL2HitLatencyBenchmark(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("set QS_BENCH=1")
	}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("QS_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	c := newCluster(t)
	root := c.root()
	dbid := root.st.DBID()
	replica := c.replica(dbid, root.addr)
	m, _ := cache.NewShardMap(2)
	names := shardNames(t, m, 2)
	owner := c.l2Proxy(dbid, m, names[0], replica.addr, root.addr)
	asker := c.l2Proxy(dbid, m, names[1], replica.addr, root.addr)
	l3only := c.l2Proxy(dbid, m, names[1]+"-l3", replica.addr, root.addr)
	keys := writeEvicted(t, root, []*node{owner.node, asker.node, l3only.node}, "key", 2*n)
	ofOwner := ownKeys(m, names[0], keys)
	readChecked(t, owner.node, ofOwner)
	c.startL2(asker, m, 10*time.Second, owner.addr)
	waitPeersUp(t, asker.l2, 1)
	measure := func(p *node) []time.Duration {
		var ds []time.Duration
		for _, k := range ofOwner {
			start := time.Now()
			readChecked(t, p, []string{k})
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds
	}
	l2 := measure(asker.node)
	l3 := measure(l3only.node)
	q := func(ds []time.Duration, f float64) time.Duration { return ds[min(len(ds)-1, int(f*float64(len(ds))))] }
	t.Logf("%d single-key reads each: L2 hit p50 %v p99 %v p99.9 %v; L3 (replica) p50 %v p99 %v p99.9 %v; L2 hits %d",
		len(ofOwner), q(l2, .5), q(l2, .99), q(l2, .999), q(l3, .5), q(l3, .99), q(l3, .999), asker.l2.Hits())
}

func statusAddrs(l *L2) []string {
	var out []string
	for _, p := range l.Status() {
		out = append(out, p.Addr)
	}
	return out
}

// TestL2SetPeersFollowsThePeerSet: a proxy's peer set changes at run
// time. A peer added is connected and asked for its shard's keys; a
// peer kept keeps its connection; a peer removed is disconnected, its
// l2_peer_up series is no longer exported, and its shard's keys are
// fetched from the next tier. After Close, SetPeers does nothing.
func TestL2SetPeersFollowsThePeerSet(t *testing.T) {
	c := newCluster(t)
	root := c.root()
	dbid := root.st.DBID()
	replica := c.replica(dbid, root.addr)
	m, _ := cache.NewShardMap(4)
	names := shardNames(t, m, 3)
	var ps []*l2Node
	var nodes []*node
	for _, name := range names {
		p := c.l2Proxy(dbid, m, name, replica.addr, root.addr)
		ps, nodes = append(ps, p), append(nodes, p.node)
	}
	p0, p1, p2 := ps[0], ps[1], ps[2]
	c.startL2(p0, m, 10*time.Second, p1.addr)
	waitPeersUp(t, p0.l2, 1)

	// A new peer joins (an address named twice counts once); the kept one
	// keeps its connection.
	p0.l2.SetPeers([]string{p1.addr, p2.addr, p1.addr})
	if got, want := statusAddrs(p0.l2), []string{p1.addr, p2.addr}; !slices.Equal(got, want) {
		t.Fatalf("peers after adding one: %v, want %v", got, want)
	}
	waitPeersUp(t, p0.l2, 2)

	keys := writeEvicted(t, root, nodes, "key", 200)
	owned := map[*l2Node][]string{}
	for _, p := range ps {
		owned[p] = ownKeys(m, p.name, keys)
	}
	if len(owned[p1]) == 0 || len(owned[p2]) == 0 {
		t.Fatalf("no keys in the shards of %s or %s", p1.name, p2.name)
	}
	readChecked(t, p1.node, owned[p1]) // the owners warm their shards
	readChecked(t, p2.node, owned[p2])
	readChecked(t, p0.node, append(slices.Clone(owned[p1]), owned[p2]...))
	if got, want := p0.l2.Hits(), int64(len(owned[p1])+len(owned[p2])); got != want {
		t.Fatalf("L2 hits %d after reading both peers' shards, want %d", got, want)
	}

	// A peer leaves: disconnected, its series gone, its shard's keys
	// fetched from the next tier.
	if !l2PeerExported(t, c.metrics, c.name, p1.addr) {
		t.Fatalf("l2_peer_up of %s not exported while it is a peer", p1.addr)
	}
	p0.l2.SetPeers([]string{p2.addr})
	if got, want := statusAddrs(p0.l2), []string{p2.addr}; !slices.Equal(got, want) {
		t.Fatalf("peers after removing one: %v, want %v", got, want)
	}
	if l2PeerExported(t, c.metrics, c.name, p1.addr) {
		t.Fatalf("l2_peer_up of removed peer %s still exported", p1.addr)
	}
	waitPeersUp(t, p0.l2, 1)
	// Keys p0 never read, warmed at the removed peer: p0 fetches them
	// from the next tier, not from that peer.
	late := ownKeys(m, p1.name, writeEvicted(t, root, nodes, "late", 100))
	readChecked(t, p1.node, late)
	hits, l3 := p0.l2.Hits(), p0.l3.keys.Load()
	readChecked(t, p0.node, late)
	if p0.l2.Hits() != hits {
		t.Fatalf("keys of removed peer %s answered by L2", p1.addr)
	}
	if got := p0.l3.keys.Load() - l3; got != int64(len(late)) {
		t.Fatalf("%d keys of removed peer %s fetched from the next tier, want %d", got, p1.addr, len(late))
	}

	p0.l2.Close()
	p0.l2.SetPeers([]string{p1.addr})
	if got, want := statusAddrs(p0.l2), []string{p2.addr}; !slices.Equal(got, want) {
		t.Fatalf("peers changed after Close: %v, want %v", got, want)
	}
}

// TestL2ConfigRejectsBadTiming: an attempt timeout or sideline out of
// bounds is refused with the setting named, and no tier starts.
func TestL2ConfigRejectsBadTiming(t *testing.T) {
	m, err := cache.NewShardMap(4)
	if err != nil {
		t.Fatal(err)
	}
	base := L2Config{Database: "db", Shards: m, NodeName: "a", Next: &Pool{}}
	for _, c := range []struct {
		mod  func(*L2Config)
		want string
	}{
		{func(c *L2Config) { c.AttemptTimeout = time.Microsecond }, "L2 attempt timeout 1µs"},
		{func(c *L2Config) { c.AttemptTimeout = time.Minute }, "L2 attempt timeout 1m0s"},
		{func(c *L2Config) { c.SidelineMin = -time.Second }, "L2 sideline -1s"},
		{func(c *L2Config) { c.SidelineMin, c.SidelineMax = time.Second, time.Millisecond }, "L2 sideline max 1ms"},
		{func(c *L2Config) { c.DialTimeout = time.Microsecond }, "dial timeout"},
	} {
		cfg := base
		c.mod(&cfg)
		l, err := NewL2(cfg, testLogger())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error with %q, got %v", c.want, err)
		}
		if l != nil {
			l.Close()
			t.Error("a tier started with a bad setting")
		}
	}
	cfg := base
	cfg.EnsureDefaults()
	if cfg.AttemptTimeout != cache.DefaultL2AttemptTimeout || cfg.SidelineMin != cache.DefaultL2SidelineMin || cfg.SidelineMax != cache.DefaultL2SidelineMax {
		t.Errorf("defaults: %v %v %v", cfg.AttemptTimeout, cfg.SidelineMin, cfg.SidelineMax)
	}
}
