package repl

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func writeOps(t *testing.T, st *store.Store, ops ...wal.Op) uint64 {
	t.Helper()
	r, err := st.Write(context.Background(), store.Batch{Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	return r.Index
}

func setOp(k, v string) wal.Op { return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(v)} }
func delOp(k string) wal.Op    { return wal.Op{Type: wal.OpDelete, Key: []byte(k)} }

// fetchSession opens a fetch connection.
func fetchSession(t *testing.T, addr string, st *store.Store) net.Conn {
	t.Helper()
	c, m := rawSession(t, addr, &Hello{Version: FetchVersion, Fetch: true, Database: st.Name(), DBID: st.DBID(), ProcessID: NewProcessID()})
	w, ok := m.(*Welcome)
	if !ok {
		t.Fatalf("fetch hello answered %+v", m)
	}
	if w.AppliedIndex != st.AppliedIndex() {
		t.Fatalf("welcome applied %d", w.AppliedIndex)
	}
	return c
}

func roundTrip(t *testing.T, c net.Conn, f *Fetch) *Values {
	t.Helper()
	if err := WriteMessage(c, f); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMessage(c)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(*Values)
	if !ok {
		t.Fatalf("fetch answered %+v", m)
	}
	if v.ID != f.ID || len(v.Results) != len(f.Items) {
		t.Fatalf("answer id %d with %d results to fetch %d of %d keys", v.ID, len(v.Results), f.ID, len(f.Items))
	}
	return v
}

// TestFetchAnswersAsOf: a full node answers the version current at the
// asked index from its history, checks the version asked, and says
// behind, mismatch, absent and gone precisely.
func TestFetchAnswersAsOf(t *testing.T) {
	st := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	i1 := writeOps(t, st, setOp("a", "one"))
	i2 := writeOps(t, st, setOp("a", "two"), setOp("b", "x"))
	i3 := writeOps(t, st, delOp("a"))
	i4 := writeOps(t, st, setOp("a", "three"))
	addr := startServer(t, st, NewProcessID(), nil)
	c := fetchSession(t, addr, st)

	v := roundTrip(t, c, &Fetch{ID: 7, AsOf: i1, Items: []FetchKey{{Key: []byte("a"), Index: i1}, {Key: []byte("b"), Index: 0}, {Key: []byte("a"), Index: i2}}})
	want := []FetchResult{{Status: FetchOK, Index: i1, Value: []byte("one")}, {Status: FetchAbsent}, {Status: FetchMismatch}}
	checkResults(t, v, want)
	if v.Applied != i4 || v.Horizon != 0 {
		t.Fatalf("applied %d horizon %d", v.Applied, v.Horizon)
	}
	v = roundTrip(t, c, &Fetch{ID: 8, AsOf: i3, Items: []FetchKey{{Key: []byte("a")}, {Key: []byte("b"), Index: i2}, {Key: []byte("a"), Index: i4 + 1}}})
	checkResults(t, v, []FetchResult{{Status: FetchAbsent}, {Status: FetchOK, Index: i2, Value: []byte("x")}, {Status: FetchBehind}})
	// asof 0: the current state; asof beyond applied with no version: behind.
	v = roundTrip(t, c, &Fetch{ID: 9, AsOf: 0, Items: []FetchKey{{Key: []byte("a")}}})
	checkResults(t, v, []FetchResult{{Status: FetchOK, Index: i4, Value: []byte("three")}})
	v = roundTrip(t, c, &Fetch{ID: 10, AsOf: i4 + 5, Items: []FetchKey{{Key: []byte("a")}, {Key: []byte("a"), Index: i4}}})
	checkResults(t, v, []FetchResult{{Status: FetchBehind}, {Status: FetchOK, Index: i4, Value: []byte("three")}})

	// Pipelining: many requests before reading any answer.
	const n = 200
	for i := 0; i < n; i++ {
		if err := WriteMessage(c, &Fetch{ID: uint64(100 + i), AsOf: i2, Items: []FetchKey{{Key: []byte("a"), Index: i2}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		m, err := ReadMessage(c)
		if err != nil {
			t.Fatal(err)
		}
		if v := m.(*Values); v.ID != uint64(100+i) || string(v.Results[0].Value) != "two" {
			t.Fatalf("pipelined answer %d: %+v", i, v)
		}
	}
}

// TestFetchGone: below the history horizon the server says gone.
func TestFetchGone(t *testing.T) {
	st, err := store.Open(store.Options{Name: dbName(t), Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1,
		History: store.HistoryOptions{Retention: -1}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	i1 := writeOps(t, st, setOp("a", "one"))
	writeOps(t, st, setOp("a", "two"))
	addr := startServer(t, st, NewProcessID(), nil)
	c := fetchSession(t, addr, st)
	v := roundTrip(t, c, &Fetch{ID: 1, AsOf: i1, Items: []FetchKey{{Key: []byte("a"), Index: i1}}})
	checkResults(t, v, []FetchResult{{Status: FetchGone}})
	if v.Horizon != st.AppliedIndex() {
		t.Fatalf("horizon %d without history", v.Horizon)
	}
}

func checkResults(t *testing.T, v *Values, want []FetchResult) {
	t.Helper()
	for i, w := range want {
		g := v.Results[i]
		if g.Status != w.Status || g.Index != w.Index || string(g.Value) != string(w.Value) {
			t.Fatalf("result %d: got %s %d %q, want %s %d %q", i, g.Status, g.Index, g.Value, w.Status, w.Index, w.Value)
		}
	}
}

// TestFetchRefusals: fetch needs version 2; a proxy serves neither values
// nor snapshots; bad input is counted, refused, and the connection closed.
func TestFetchRefusals(t *testing.T) {
	st := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	writeOps(t, st, setOp("a", "1"))
	addr := startServer(t, st, NewProcessID(), nil)
	_, m := rawSession(t, addr, &Hello{Version: 1, Fetch: true, Database: st.Name(), ProcessID: NewProcessID()})
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseVersion {
		t.Fatalf("fetch at version 1: %+v", m)
	}

	po := store.ProxyOptions{Window: 1}
	px, err := store.Open(store.Options{Name: dbName(t), Dir: t.TempDir(), DBID: st.DBID(), MinFreeBytes: 1, BallastBytes: -1, Proxy: &po, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	paddr := startServer(t, px, NewProcessID(), nil)
	for _, h := range []*Hello{
		{Version: FetchVersion, Fetch: true, Database: px.Name(), ProcessID: NewProcessID()},
		{Version: 1, Bootstrap: true, Database: px.Name(), ProcessID: NewProcessID()},
	} {
		_, m := rawSession(t, paddr, h)
		if r, ok := m.(*Refuse); !ok || r.Code != RefuseProxy {
			t.Fatalf("fetch or bootstrap from a proxy: %+v", m)
		}
	}

	bad := []struct {
		name   string
		reason string
		msg    Message
	}{
		{"not a fetch", "unexpected", &Progress{}},
		{"no keys", "decode", rawMsg{t: MsgFetch, p: make([]byte, 17)}},
		{"truncated key", "decode", rawMsg{t: MsgFetch, p: append(make([]byte, 16), 1, 0, 0, 0, 0, 0, 0, 0, 0, 9, 'a')}},
		{"too many keys", "decode", rawMsg{t: MsgFetch, p: append(make([]byte, 16), 0xff, 0xff, 0x03)}},
	}
	ms := metricsOf(t) // the server's, read by the subtests
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			before := counter(t, ms.fetchRefused.WithLabelValues(b.reason))
			c := fetchSession(t, addr, st)
			if err := WriteMessage(c, b.msg); err != nil {
				t.Fatal(err)
			}
			m, err := ReadMessage(c)
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := m.(*Refuse); !ok || r.Code != RefuseBadRequest {
				t.Fatalf("answered %+v", m)
			}
			if _, err := ReadMessage(c); !errors.Is(err, io.EOF) {
				t.Fatalf("connection not closed: %v", err)
			}
			if counter(t, ms.fetchRefused.WithLabelValues(b.reason)) != before+1 {
				t.Fatal("bad request not counted")
			}
		})
	}
	// A corrupt frame closes the connection, counted.
	before := counter(t, metricsOf(t).fetchRefused.WithLabelValues("crc"))
	c := fetchSession(t, addr, st)
	fr, _ := AppendFrame(nil, &Fetch{ID: 1, Items: []FetchKey{{Key: []byte("a")}}})
	fr[len(fr)-1] ^= 1
	c.Write(fr)
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := ReadMessage(c); err == nil {
		t.Fatal("corrupt frame answered")
	}
	if counter(t, metricsOf(t).fetchRefused.WithLabelValues("crc")) != before+1 {
		t.Fatal("corrupt frame not counted")
	}
}

// TestFetchValueTooLargeForAnAnswer: a value no answer can carry is
// answered error (and counted), the other keys of the request are
// answered, and the connection stays usable (it used to be closed).
func TestFetchValueTooLargeForAnAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 128 MiB value")
	}
	st, err := store.Open(store.Options{Name: dbName(t), Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1,
		MaxValueBytes: MaxFetchValueBytes + 1, MaxBatchBytes: MaxFetchValueBytes + 1<<20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ib := writeOps(t, st, wal.Op{Type: wal.OpSet, Key: []byte("big"), Value: make([]byte, MaxFetchValueBytes+1)})
	is := writeOps(t, st, setOp("small", "v"))
	addr := startServer(t, st, NewProcessID(), nil)
	c := fetchSession(t, addr, st)
	before := counter(t, metricsOf(t).fetchTooLarge)
	v := roundTrip(t, c, &Fetch{ID: 1, Items: []FetchKey{{Key: []byte("big"), Index: ib}, {Key: []byte("small"), Index: is}}})
	checkResults(t, v, []FetchResult{{Status: FetchError}, {Status: FetchOK, Index: is, Value: []byte("v")}})
	if n := counter(t, metricsOf(t).fetchTooLarge) - before; n != 1 {
		t.Errorf("fetch_values_too_large_total rose by %v, want 1", n)
	}
	v = roundTrip(t, c, &Fetch{ID: 2, Items: []FetchKey{{Key: []byte("small"), Index: is}}})
	checkResults(t, v, []FetchResult{{Status: FetchOK, Index: is, Value: []byte("v")}})
}

// TestFetchWaitsForTheNextCommit: a fetch for a version one commit ahead
// of the server waits for that commit and is answered ok, not behind; a
// version the server does not reach in time is answered behind. Both are
// counted.
func TestFetchWaitsForTheNextCommit(t *testing.T) {
	st := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	i1 := writeOps(t, st, setOp("a", "one"))
	addr := startServer(t, st, NewProcessID(), nil)
	c := fetchSession(t, addr, st)

	waiting := make(chan struct{}, 1)
	testHookCatchUp = func() { waiting <- struct{}{} }
	t.Cleanup(func() { testHookCatchUp = nil })
	caughtUp, timedOut := counter(t, metricsOf(t).fetchCatchUp.WithLabelValues("caught_up")), counter(t, metricsOf(t).fetchCatchUp.WithLabelValues("timeout"))
	if err := WriteMessage(c, &Fetch{ID: 1, Items: []FetchKey{{Key: []byte("a"), Index: i1 + 1}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-time.After(60 * time.Second):
		t.Fatal("a fetch one commit ahead did not wait for it")
	}
	i2 := writeOps(t, st, setOp("a", "two"))
	m, err := ReadMessage(c)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, m.(*Values), []FetchResult{{Status: FetchOK, Index: i2, Value: []byte("two")}})
	if got := counter(t, metricsOf(t).fetchCatchUp.WithLabelValues("caught_up")) - caughtUp; got != 1 {
		t.Errorf("fetch_catchup_total{result=caught_up} rose by %v, want 1", got)
	}

	v := roundTrip(t, c, &Fetch{ID: 2, AsOf: i2 + 3, Items: []FetchKey{{Key: []byte("a")}}})
	checkResults(t, v, []FetchResult{{Status: FetchBehind}})
	if got := counter(t, metricsOf(t).fetchCatchUp.WithLabelValues("timeout")) - timedOut; got != 1 {
		t.Errorf("fetch_catchup_total{result=timeout} rose by %v, want 1", got)
	}
}
