package repl

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// countingFetcher fetches from a full store and counts the keys asked.
type countingFetcher struct {
	viewFetcher
	keys atomic.Int64
}

func (f *countingFetcher) Fetch(ctx context.Context, asOf uint64, items []store.FetchItem) error {
	f.keys.Add(int64(len(items)))
	return f.viewFetcher.Fetch(ctx, asOf, items)
}

// openProxy opens a proxy store with a transient tier, replicating from
// rootAddr and fetching from root.
func openProxy(t *testing.T, root *store.Store, rootAddr string) (*store.Store, *countingFetcher) {
	t.Helper()
	po := store.ProxyOptions{Window: 1, CacheBytes: -1, TransientBytes: 1 << 20}
	st, err := store.Open(store.Options{Name: root.Name(), Dir: t.TempDir(), DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Proxy: &po, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &countingFetcher{viewFetcher: viewFetcher{src: root}}
	st.SetFetcher(f)
	_, stop := startReplica(t, st, NewProcessID(), []string{rootAddr}, nil)
	t.Cleanup(stop)
	return st, f
}

// waitRemote waits until st has caught up with root and keeps no more
// than n values (those of its window).
func waitRemote(t *testing.T, st, root *store.Store, n int64) {
	t.Helper()
	waitCaughtUp(t, st, root)
	waitFor(t, "values outside the window evicted", 30*time.Second, func() bool { return st.ProxyStats().CachedValues <= n })
}

// readKey reads key at st, as a reader would.
func readKey(t *testing.T, st *store.Store, key string) (string, uint64, bool) {
	t.Helper()
	var val string
	var idx uint64
	var found bool
	if _, err := st.Lookup([][]byte{[]byte(key)}, func(_ uint64, _ int, v []byte, i uint64, f bool) error {
		val, idx, found = string(v), i, f
		return nil
	}); err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return val, idx, found
}

// TestPrefetchServesAnotherProxysMiss: a key one proxy missed, resolved
// by the relay, is then served by another proxy of the data centre from
// its transient tier, without a fetch.
func TestPrefetchServesAnotherProxysMiss(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	i1 := writeOps(t, root, setOp("a", "one"), setOp("b", "x"))
	writeOps(t, root, setOp("pad", "1"))
	rootAddr := startServer(t, root, NewProcessID(), nil)
	relay, _ := openProxy(t, root, rootAddr)
	waitRemote(t, relay, root, 1)
	relayAddr := startServer(t, relay, NewProcessID(), func(c *ServerConfig) { c.Relay = func(string) bool { return true } })
	other, f := openProxy(t, root, rootAddr)
	waitRemote(t, other, root, 1)
	p := StartPrefetch(PrefetchConfig{Metrics: metricsOf(t), Database: root.Name(), DBID: root.DBID(), ProcessID: NewProcessID(), Relays: []string{relayAddr},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}, other, quiet)
	defer p.Close()

	// A proxy misses a; the relay resolves it. The subscription may not be
	// open yet at the first miss (what is published before is lost): miss
	// again until the other proxy has it.
	c := fetchSession(t, relayAddr, relay)
	deadline := time.Now().Add(30 * time.Second)
	for id := uint64(1); p.Stats().Admitted == 0; id++ {
		if time.Now().After(deadline) {
			t.Fatalf("no prefetch admitted in 30s: %+v", p.Stats())
		}
		v := roundTrip(t, c, &Fetch{ID: id, Items: []FetchKey{{Key: []byte("a"), Index: i1}}})
		checkResults(t, v, []FetchResult{{Status: FetchOK, Index: i1, Value: []byte("one")}})
		time.Sleep(10 * time.Millisecond)
	}
	if val, idx, found := readKey(t, other, "a"); !found || val != "one" || idx != i1 {
		t.Fatalf("a at the other proxy: %q@%d found=%v", val, idx, found)
	}
	if n := f.keys.Load(); n != 0 {
		t.Fatalf("the other proxy fetched %d keys, want 0: a was prefetched", n)
	}
	// b was not missed anywhere: fetched.
	if val, _, _ := readKey(t, other, "b"); val != "x" || f.keys.Load() != 1 {
		t.Fatalf("b: %q after %d fetched keys", val, f.keys.Load())
	}
}

// fakeRelay accepts prefetch subscriptions and runs one script on each,
// in order; a connection whose script returns is closed.
func fakeRelay(t *testing.T, dbid store.DBID, scripts ...func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := ReadMessage(c); err == nil {
				WriteMessage(c, &Welcome{Version: FetchVersion, ProcessID: NewProcessID(), DBID: dbid})
				if i < len(scripts) {
					scripts[i](c)
				} else {
					var b [1]byte
					c.Read(b[:]) // until the subscriber hangs up
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestPrefetchRefusesBadMessages: a malformed message, a frame cut short,
// a corrupt frame and a message a prefetch stream does not carry are each
// refused and counted; the subscriber reconnects after each, nothing of
// them reaches the store, and a good message on the next subscription is
// served.
func TestPrefetchRefusesBadMessages(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	i1 := writeOps(t, root, setOp("a", "one"))
	writeOps(t, root, setOp("pad", "1"))
	rootAddr := startServer(t, root, NewProcessID(), nil)
	px, f := openProxy(t, root, rootAddr)
	waitRemote(t, px, root, 1)
	good, err := AppendFrame(nil, &Prefetch{Index: i1, Key: []byte("a"), Value: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	badKey := append([]byte(nil), good...)
	badKey[5+8] = 0 // key length 0
	fixCRC(badKey)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-6] ^= 0xff // a value byte: the frame's CRC fails
	values, _ := AppendFrame(nil, &Values{ID: 1})
	send := func(b []byte) func(net.Conn) { return func(c net.Conn) { c.Write(b) } }
	addr := fakeRelay(t, root.DBID(), send(badKey), send(good[:len(good)-3]), send(corrupt), send(values),
		func(c net.Conn) {
			c.Write(good)
			var b [1]byte
			c.Read(b[:]) // until the subscriber hangs up
		})
	p := StartPrefetch(PrefetchConfig{Metrics: metricsOf(t), Database: root.Name(), DBID: root.DBID(), ProcessID: NewProcessID(), Relays: []string{addr},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, px, quiet)
	defer p.Close()
	waitFor(t, "four refused messages", 30*time.Second, func() bool { return p.Stats().Refused >= 4 })
	for _, reason := range []string{"decode", "truncated", "crc", "unexpected"} {
		if n := counter(t, metricsOf(t).prefetchRefused.WithLabelValues(root.Name(), reason)); n != 1 {
			t.Errorf("%s: %v refused, want 1", reason, n)
		}
	}
	waitFor(t, "the good message of the fifth subscription", 30*time.Second, func() bool { return p.Stats().Admitted == 1 })
	if st := p.Stats(); st.Received != 1 || st.Refused != 4 {
		t.Fatalf("%+v: want 1 message received, 4 refused", st)
	}
	if val, _, _ := readKey(t, px, "a"); val != "one" || f.keys.Load() != 0 {
		t.Fatalf("a: %q after %d fetched keys, want it served from the prefetch", val, f.keys.Load())
	}
}

// fixCRC recomputes the checksum of one frame.
func fixCRC(frame []byte) {
	re, _ := AppendFrame(nil, rawPayload{t: MsgType(frame[0]), p: frame[5 : len(frame)-4]})
	copy(frame, re)
}

type rawPayload struct {
	t MsgType
	p []byte
}

func (r rawPayload) Type() MsgType                   { return r.t }
func (r rawPayload) AppendPayload(dst []byte) []byte { return append(dst, r.p...) }

// TestPrefetchNeverServesAnotherVersion: a proxy ahead of its relay (a
// prefetch of a version it replaced), one behind it (a version it has not
// applied yet) and a corrupt value of the right version: none is served;
// the proxy fetches, and serves the right version. Once the proxy
// applies the prefetched version, it is served without a fetch.
func TestPrefetchNeverServesAnotherVersion(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	i1 := writeOps(t, root, setOp("a", "one"), setOp("b", "bee"))
	i2 := writeOps(t, root, setOp("a", "two"))
	writeOps(t, root, setOp("pad", "1"))
	rootAddr := startServer(t, root, NewProcessID(), nil)
	px, f := openProxy(t, root, rootAddr)
	waitRemote(t, px, root, 1)
	i3 := i2 + 2 // c will be written at i3
	msgs := []*Prefetch{
		{Index: i1, Key: []byte("a"), Value: []byte("one")},     // older than the proxy's a
		{Index: i1, Key: []byte("b"), Value: []byte("BEE")},     // the right version, corrupt
		{Index: i3, Key: []byte("c"), Value: []byte("sea")},     // newer than the proxy
		{Index: i3 + 50, Key: []byte("d"), Value: []byte("no")}, // never written
	}
	addr := fakeRelay(t, root.DBID(), func(c net.Conn) {
		for _, m := range msgs {
			WriteMessage(c, m)
		}
		var b [1]byte
		c.Read(b[:])
	})
	p := StartPrefetch(PrefetchConfig{Metrics: metricsOf(t), Database: root.Name(), DBID: root.DBID(), ProcessID: NewProcessID(), Relays: []string{addr},
		BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, px, quiet)
	defer p.Close()
	waitFor(t, "four prefetches admitted", 30*time.Second, func() bool { return p.Stats().Admitted == 4 })

	for _, want := range []struct {
		key, val string
		index    uint64
		found    bool
		fetched  int64
	}{{"a", "two", i2, true, 1}, {"b", "bee", i1, true, 2}, {"c", "", 0, false, 2}, {"d", "", 0, false, 2}} {
		val, idx, found := readKey(t, px, want.key)
		if val != want.val || idx != want.index || found != want.found || f.keys.Load() != want.fetched {
			t.Fatalf("%s: %q@%d found=%v after %d fetched keys, want %q@%d found=%v after %d",
				want.key, val, idx, found, f.keys.Load(), want.val, want.index, want.found, want.fetched)
		}
	}
	// The proxy applies c's version: the prefetch serves it.
	if got := writeOps(t, root, setOp("c", "sea")); got != i3 {
		t.Fatalf("c written at %d, want %d", got, i3)
	}
	writeOps(t, root, setOp("pad", "2"))
	waitRemote(t, px, root, 1)
	if val, idx, _ := readKey(t, px, "c"); val != "sea" || idx != i3 || f.keys.Load() != 2 {
		t.Fatalf("c: %q@%d after %d fetched keys, want sea@%d served from the prefetch", val, idx, f.keys.Load(), i3)
	}
}

// TestPrefetchDecodeRefusesBadPayloads: version 0, a key length of 0, over
// the limit or beyond the payload, and a payload too short are malformed;
// a Hello asking for a prefetch stream together with a fetch connection
// or a bootstrap is too.
func TestPrefetchDecodeRefusesBadPayloads(t *testing.T) {
	good := (&Prefetch{Index: 3, Key: []byte("k"), Value: []byte("v")}).AppendPayload(nil)
	long := (&Prefetch{Index: 3, Key: make([]byte, wal.MaxKeyLen+1)}).AppendPayload(nil)
	for name, p := range map[string][]byte{
		"short":            good[:9],
		"version 0":        append(make([]byte, 8), good[8:]...),
		"key length 0":     append(append([]byte(nil), good[:8]...), 0, 'v'),
		"key too long":     long,
		"key past the end": append(append([]byte(nil), good[:8]...), 5, 'k'),
	} {
		if _, err := decodePrefetch(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want malformed", name, err)
		}
	}
	if m, err := decodePrefetch(good); err != nil || m.Index != 3 || string(m.Key) != "k" || string(m.Value) != "v" {
		t.Fatalf("good payload: %+v, %v", m, err)
	}
	for _, h := range []*Hello{{Version: 2, Prefetch: true, Fetch: true}, {Version: 2, Prefetch: true, Bootstrap: true}} {
		if _, err := decodeHello(h.AppendPayload(nil)); !errors.Is(err, ErrMalformed) {
			t.Errorf("hello %+v: %v, want malformed", h, err)
		}
	}
}

// TestPrefetchRefusedByANonRelay: a node that is not a relay of the
// database refuses a prefetch subscription (bad_request, counted), and
// the subscriber counts no message.
func TestPrefetchRefusedByANonRelay(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	before := counter(t, metricsOf(t).refusals.WithLabelValues(RefuseBadRequest.String()))
	_, m := rawSession(t, addr, &Hello{Version: FetchVersion, Prefetch: true, Database: root.Name(), ProcessID: NewProcessID()})
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseBadRequest {
		t.Fatalf("prefetch hello to a full node answered %+v, want refuse bad_request", m)
	}
	if n := counter(t, metricsOf(t).refusals.WithLabelValues(RefuseBadRequest.String())) - before; n != 1 {
		t.Fatalf("%v refusals counted, want 1", n)
	}
}
