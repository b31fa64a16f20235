package repl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// TestFetchFlagsEncoding: a Fetch without flags is the version-2 message
// byte for byte; with FetchQuiet it carries one more byte and decodes
// back; a zero, unknown or second flags byte does not decode.
func TestFetchFlagsEncoding(t *testing.T) {
	plain := &Fetch{ID: 9, AsOf: 5, Items: []FetchKey{{Key: []byte("k"), Index: 3}}}
	quiet := *plain
	quiet.Flags = FetchQuiet
	pp, qp := plain.AppendPayload(nil), quiet.AppendPayload(nil)
	if !bytes.Equal(qp[:len(qp)-1], pp) || qp[len(qp)-1] != byte(FetchQuiet) {
		t.Fatalf("quiet fetch %x is not the plain one %x and its flags", qp, pp)
	}
	m, err := decodeFetch(qp)
	if err != nil || m.Flags != FetchQuiet || len(m.Items) != 1 || string(m.Items[0].Key) != "k" {
		t.Fatalf("quiet fetch decoded as %+v, %v", m, err)
	}
	for name, p := range map[string][]byte{
		"zero flags":       append(slices.Clone(pp), 0),
		"unknown flag":     append(slices.Clone(pp), 2),
		"quiet and more":   append(slices.Clone(pp), byte(FetchQuiet)|0x80),
		"two flags bytes":  append(slices.Clone(qp), 1),
		"flags and a byte": append(slices.Clone(qp), 0),
	} {
		if m, err := decodeFetch(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decoded %+v, %v; want ErrMalformed", name, m, err)
		}
	}
}

// readPrefetch reads c until a Prefetch arrives, skipping Progress.
func readPrefetch(t *testing.T, c net.Conn) *Prefetch {
	t.Helper()
	for {
		m, err := ReadMessage(c)
		if err != nil {
			t.Fatalf("prefetch stream: %v", err)
		}
		switch m := m.(type) {
		case *Prefetch:
			return m
		case *Progress:
		default:
			t.Fatalf("prefetch stream sent %s", m.Type())
		}
	}
}

// subscribe opens a prefetch subscription to the relay at addr and waits
// until the relay has it: the first Progress comes from the stream's
// loop, which starts once the subscriber is registered.
func subscribe(t *testing.T, addr string, st *store.Store) net.Conn {
	t.Helper()
	c, m := rawSession(t, addr, &Hello{Version: FetchVersion, Prefetch: true, Database: st.Name(), DBID: st.DBID(), ProcessID: NewProcessID()})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("prefetch hello answered %+v", m)
	}
	m, err := ReadMessage(c)
	if _, ok := m.(*Progress); err != nil || !ok {
		t.Fatalf("first message of an idle prefetch stream: %+v, %v", m, err)
	}
	return c
}

// TestQuietFetchIsNotPublished: a relay with a prefetch subscriber
// answers a quiet fetch with the values and publishes none of them
// (counted), while a plain fetch after it, on the same connection, is
// published: the subscriber's first value is the plain fetch's.
func TestQuietFetchIsNotPublished(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	ia := writeOps(t, root, setOp("a", "warm"))
	ib := writeOps(t, root, setOp("b", "read"))
	writeOps(t, root, setOp("pad", "1"))
	rootAddr := startServer(t, root, NewProcessID(), nil)
	relay, f := openProxy(t, root, rootAddr)
	waitRemote(t, relay, root, 1)
	relayAddr := startServer(t, relay, NewProcessID(), func(c *ServerConfig) { c.Relay = func(string) bool { return true } })
	sub := subscribe(t, relayAddr, relay)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fc, err := DialFetch(ctx, nil, relayAddr, FetchHello{Database: relay.Name(), DBID: relay.DBID(), ProcessID: NewProcessID()})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if !fc.Quiet() || fc.Welcome.Version != QuietVersion {
		t.Fatalf("fetch connection of version %d, quiet %v; want %d, quiet", fc.Welcome.Version, fc.Quiet(), QuietVersion)
	}
	quiet0, queued0 := counter(t, metricsOf(t).fetchQuiet), counter(t, metricsOf(t).prefetchPublished.WithLabelValues("queued"))
	v, err := fc.FetchQuiet(ctx, 0, []FetchKey{{Key: []byte("a"), Index: ia}})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, v, []FetchResult{{Status: FetchOK, Index: ia, Value: []byte("warm")}})
	if f.keys.Load() != 1 {
		t.Fatalf("the relay fetched %d keys for the quiet fetch, want 1", f.keys.Load())
	}
	if n := counter(t, metricsOf(t).fetchQuiet) - quiet0; n != 1 {
		t.Fatalf("fetch_quiet_total rose by %v, want 1", n)
	}
	v, err = fc.Fetch(ctx, 0, []FetchKey{{Key: []byte("b"), Index: ib}})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, v, []FetchResult{{Status: FetchOK, Index: ib, Value: []byte("read")}})
	// One queue per subscriber, in publishing order: had a been
	// published, it would come first.
	if p := readPrefetch(t, sub); string(p.Key) != "b" || p.Index != ib || string(p.Value) != "read" {
		t.Fatalf("first value published: %q@%d = %q, want b@%d (a was fetched quietly)", p.Key, p.Index, p.Value, ib)
	}
	if n := counter(t, metricsOf(t).prefetchPublished.WithLabelValues("queued")) - queued0; n != 1 {
		t.Fatalf("prefetch_published_total{queued} rose by %v, want 1 (the plain fetch's value)", n)
	}
	if n := counter(t, metricsOf(t).fetchQuiet) - quiet0; n != 1 {
		t.Fatalf("fetch_quiet_total rose by %v after a plain fetch, want 1", n)
	}
}

// fakeOldFetchServer behaves like a server of protocol version 5 for
// fetch connections: it refuses a later Hello with code "version", and
// decodes Fetch as that version did (no flags: trailing bytes refused),
// answering every key ok with "value of KEY" at the index asked. It
// records the versions of the Hellos and whether a Fetch carried flags.
func fakeOldFetchServer(t *testing.T, id store.DBID) (addr string, versions func() []uint16, flagged func() int) {
	ln := listen(t)
	pid := NewProcessID()
	var mu sync.Mutex
	var vs []uint16
	bad := 0
	serveConns(t, ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(60 * time.Second))
		h, ok := oldHello(c, RootVersion, func(v uint16) {
			mu.Lock()
			vs = append(vs, v)
			mu.Unlock()
		})
		if !ok {
			return
		}
		if WriteMessage(c, &Welcome{Version: h.Version, ProcessID: pid, DBID: id}) != nil {
			return
		}
		for {
			m, err := ReadMessage(c)
			if err != nil {
				return
			}
			f, ok := m.(*Fetch)
			if !ok || f.Flags != 0 {
				mu.Lock()
				bad++
				mu.Unlock()
				WriteMessage(c, &Refuse{Code: RefuseBadRequest, Reason: "bytes after the last fetch item"})
				return
			}
			ans := &Values{ID: f.ID}
			for _, it := range f.Items {
				ans.Results = append(ans.Results, FetchResult{Status: FetchOK, Index: it.Index, Value: []byte("value of " + string(it.Key))})
			}
			if WriteMessage(c, ans) != nil {
				return
			}
		}
	})
	return ln.Addr().String(), func() []uint16 {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(vs)
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return bad
		}
}

// TestQuietFetchToAnOlderServer: a server of version 5 refuses the fetch
// Hello of QuietVersion; the client opens a connection of FetchVersion
// to it in the same dial, and its quiet fetches are sent as plain ones
// (which such a relay publishes, as it always did) and answered.
func TestQuietFetchToAnOlderServer(t *testing.T) {
	id := store.DBID{6, 6}
	addr, versions, flagged := fakeOldFetchServer(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fc, err := DialFetch(ctx, nil, addr, FetchHello{Database: "db", DBID: id, ProcessID: NewProcessID()})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if fc.Quiet() || fc.Welcome.Version != FetchVersion {
		t.Fatalf("connection to an older server: version %d, quiet %v; want %d, not quiet", fc.Welcome.Version, fc.Quiet(), FetchVersion)
	}
	if v := versions(); !slices.Equal(v, []uint16{QuietVersion, FetchVersion}) {
		t.Fatalf("hello versions %v, want [%d %d]", v, QuietVersion, FetchVersion)
	}
	for i := range 3 {
		k := fmt.Sprint("k", i)
		v, err := fc.FetchQuiet(ctx, 10, []FetchKey{{Key: []byte(k), Index: 7}})
		if err != nil {
			t.Fatalf("quiet fetch %d: %v", i, err)
		}
		checkResults(t, v, []FetchResult{{Status: FetchOK, Index: 7, Value: []byte("value of " + k)}})
	}
	if n := flagged(); n != 0 {
		t.Fatalf("%d fetches with flags sent to a server of version 5", n)
	}
	// Refusals other than "version" are not retried at another version.
	_, err = DialFetch(ctx, nil, addr, FetchHello{Database: "db", DBID: store.DBID{7}, ProcessID: NewProcessID()})
	if re := (*RefusedError)(nil); !errors.As(err, &re) || re.Code != RefuseWrongDBID {
		t.Fatalf("dial expecting another database id: %v, want refused wrong_dbid", err)
	}
}

// TestFetchFlagsRefused: flags the server does not know, flags on a
// connection older than QuietVersion, and flags on an L2 connection are
// refused (bad_request), counted as decode errors, and close the
// connection; the store is untouched and answers the next connection.
func TestFetchFlagsRefused(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	ik := writeOps(t, root, setOp("k", "v"))
	rootAddr := startServer(t, root, NewProcessID(), nil)
	_, ownerAddr := openShardOwner(t, root, rootAddr, "owner-1")
	ms := metricsOf(t) // the servers', read by the subtests
	quietFetch := &Fetch{ID: 1, Items: []FetchKey{{Key: []byte("k"), Index: ik}}, Flags: FetchQuiet}
	unknown := rawMsg{t: MsgFetch, p: append((&Fetch{ID: 1, Items: []FetchKey{{Key: []byte("k"), Index: ik}}}).AppendPayload(nil), 0x40)}
	for _, tc := range []struct {
		name  string
		addr  string
		hello Hello
		msg   Message
	}{
		{"unknown flag", rootAddr, Hello{Version: QuietVersion, Fetch: true}, unknown},
		{"flags before their version", rootAddr, Hello{Version: FetchVersion, Fetch: true}, quietFetch},
		{"flags on an L2 connection", ownerAddr, Hello{Version: QuietVersion, Shard: true}, quietFetch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.hello
			h.Database, h.DBID, h.ProcessID = root.Name(), root.DBID(), NewProcessID()
			c, m := rawSession(t, tc.addr, &h)
			if _, ok := m.(*Welcome); !ok {
				t.Fatalf("hello answered %+v", m)
			}
			if h.Shard {
				if m, err := ReadMessage(c); err != nil || m.Type() != MsgNode {
					t.Fatalf("after the L2 welcome: %+v, %v", m, err)
				}
			}
			before := counter(t, ms.fetchRefused.WithLabelValues("decode"))
			if err := WriteMessage(c, tc.msg); err != nil {
				t.Fatal(err)
			}
			m, err := ReadMessage(c)
			r, ok := m.(*Refuse)
			if err != nil || !ok || r.Code != RefuseBadRequest {
				t.Fatalf("answered %+v, %v; want refuse bad_request", m, err)
			}
			t.Logf("refused: %s", r.Reason)
			if _, err := ReadMessage(c); !errors.Is(err, io.EOF) {
				t.Fatalf("connection not closed: %v", err)
			}
			if n := counter(t, ms.fetchRefused.WithLabelValues("decode")) - before; n != 1 {
				t.Fatalf("fetch_bad_requests_total{decode} rose by %v, want 1", n)
			}
		})
	}
	c := fetchSession(t, rootAddr, root)
	v := roundTrip(t, c, &Fetch{ID: 2, Items: []FetchKey{{Key: []byte("k"), Index: ik}}})
	checkResults(t, v, []FetchResult{{Status: FetchOK, Index: ik, Value: []byte("v")}})
}
