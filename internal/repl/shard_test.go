package repl

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/store"
)

// openShardOwner opens a proxy named node owning the only shard of its
// data centre, replicating from rootAddr and fetching from root, and
// serves its L2 connections.
func openShardOwner(t *testing.T, root *store.Store, rootAddr, node string) (*store.Store, string) {
	t.Helper()
	one, _ := cache.NewShardMap(1)
	po := store.ProxyOptions{Window: 1, CacheBytes: -1, ShardCacheBytes: 1 << 20, Shards: one, NodeName: node}
	st, err := store.Open(store.Options{Name: root.Name(), Dir: t.TempDir(), DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Proxy: &po, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.SetFetcher(&countingFetcher{viewFetcher: viewFetcher{src: root}})
	_, stop := startReplica(t, st, NewProcessID(), []string{rootAddr}, nil)
	t.Cleanup(stop)
	addr := startServer(t, st, NewProcessID(), func(c *ServerConfig) { c.NodeName = node })
	return st, addr
}

// TestShardConnectionAnswersExactVersions: an L2 connection learns the
// owner's node name; the owner answers the version it holds, and a miss
// (never another version, never a fetch) for any other version or a
// value it does not hold.
func TestShardConnectionAnswersExactVersions(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	write(t, root, "first", "x")
	write(t, root, "held", "held value")
	write(t, root, "never", "never read")
	writeN(t, root, "pad", 5)
	owner, addr := openShardOwner(t, root, rootAddr, "owner-1")
	waitRemote(t, owner, root, 1)
	val, idx, _ := readKey(t, owner, "held") // fetched: now in the shard budget
	if val != "held value" {
		t.Fatalf("owner read %q", val)
	}
	_, nidx, _ := readKey(t, root, "never")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc, err := DialFetch(ctx, nil, addr, FetchHello{Database: root.Name(), DBID: root.DBID(), ProcessID: NewProcessID(), Shard: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if fc.Node != "owner-1" {
		t.Fatalf("L2 connection names the owner %q", fc.Node)
	}
	hits, misses := counter(t, metricsOf(t).shardKeys.WithLabelValues("hit")), counter(t, metricsOf(t).shardKeys.WithLabelValues("miss"))
	ans, err := fc.Fetch(ctx, 0, []FetchKey{{Key: []byte("held"), Index: idx}, {Key: []byte("held"), Index: idx + 1},
		{Key: []byte("held"), Index: idx - 1}, {Key: []byte("never"), Index: nidx}})
	if err != nil {
		t.Fatal(err)
	}
	if r := ans.Results[0]; r.Status != FetchOK || r.Index != idx || string(r.Value) != "held value" {
		t.Fatalf("held version: %v %d %q", r.Status, r.Index, r.Value)
	}
	for i, r := range ans.Results[1:] {
		if r.Status != FetchMismatch || r.Value != nil {
			t.Fatalf("key %d: %v %q, want a miss", i+1, r.Status, r.Value)
		}
	}
	if h, m := counter(t, metricsOf(t).shardKeys.WithLabelValues("hit"))-hits, counter(t, metricsOf(t).shardKeys.WithLabelValues("miss"))-misses; h != 1 || m != 3 {
		t.Fatalf("shard_keys_total hit +%v miss +%v, want +1 +3", h, m)
	}
	if st := owner.ProxyStats(); st.Fetched != 1 {
		t.Fatalf("the owner fetched %d values; it never fetches for an L2 request", st.Fetched)
	}
}

// TestShardConnectionRefusesBadRequests: an L2 request naming no version
// closes the connection, counted; an L2 hello is refused by a full node
// and by a proxy without a node name.
func TestShardConnectionRefusesBadRequests(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	write(t, root, "k", "v")
	_, addr := openShardOwner(t, root, rootAddr, "owner-1")

	hello := &Hello{Version: FetchVersion, Shard: true, Database: root.Name(), DBID: root.DBID(), ProcessID: NewProcessID()}
	c, m := rawSession(t, addr, hello)
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("L2 hello answered %+v", m)
	}
	if m, err := ReadMessage(c); err != nil || m.(*Node).Name != "owner-1" {
		t.Fatalf("after the welcome: %+v, %v", m, err)
	}
	before := counter(t, metricsOf(t).fetchRefused.WithLabelValues("decode"))
	if err := WriteMessage(c, &Fetch{ID: 1, Items: []FetchKey{{Key: []byte("k"), Index: 0}}}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMessage(c)
	if r, ok := m.(*Refuse); err != nil || !ok || r.Code != RefuseBadRequest {
		t.Fatalf("an L2 request without a version answered %+v, %v", m, err)
	}
	if got := counter(t, metricsOf(t).fetchRefused.WithLabelValues("decode")); got != before+1 {
		t.Fatalf("fetch_bad_requests_total{decode} %v → %v", before, got)
	}

	_, m = rawSession(t, rootAddr, hello)
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseBadRequest {
		t.Fatalf("a full node answered an L2 hello with %+v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = DialFetch(ctx, nil, rootAddr, FetchHello{Database: root.Name(), Shard: true, ProcessID: NewProcessID()})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("L2 dial of a full node: %v", err)
	}
}

func TestShardMessagesDecode(t *testing.T) {
	for _, p := range [][]byte{nil, {0}, {3, 'a', 'b'}, {1, 'a', 'b'}} {
		if _, err := decodeNode(p); !errors.Is(err, ErrMalformed) {
			t.Fatalf("node payload %q decoded: %v", p, err)
		}
	}
	m, err := DecodePayload(MsgNode, (&Node{Name: "n1"}).AppendPayload(nil))
	if err != nil || m.(*Node).Name != "n1" {
		t.Fatalf("node round trip: %+v, %v", m, err)
	}
	for _, h := range []Hello{{Shard: true, Fetch: true}, {Shard: true, Prefetch: true}, {Shard: true, Bootstrap: true}} {
		h.Version, h.Database = FetchVersion, "db"
		if _, err := decodeHello(h.AppendPayload(nil)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("hello %+v decoded: %v", h, err)
		}
	}
	h := Hello{Version: FetchVersion, Database: "db", Shard: true}
	got, err := decodeHello(h.AppendPayload(nil))
	if err != nil || !got.Shard || got.Fetch {
		t.Fatalf("L2 hello round trip: %+v, %v", got, err)
	}
}
