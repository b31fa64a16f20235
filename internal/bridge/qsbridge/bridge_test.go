package qsbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/bridge"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

var quiet = slog.New(slog.DiscardHandler)

func openStore(t *testing.T, id store.DBID) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Name: "default", Dir: t.TempDir(), DBID: id, MinFreeBytes: 1, BallastBytes: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// serveRepl serves st's log on a replication listener.
func serveRepl(t *testing.T, st *store.Store) string {
	t.Helper()
	srv, err := repl.NewServer(repl.ServerConfig{ProcessID: repl.NewProcessID(), ProgressInterval: 50 * time.Millisecond},
		func(db string) (*store.Store, bool) { return st, db == st.Name() }, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// serveTarget serves st over HTTP, bridged when bridged is set.
func serveTarget(t *testing.T, st *store.Store, bridged bool) string {
	t.Helper()
	d := &service.Database{Name: st.Name(), Store: st}
	if bridged {
		d.Bridge = st.Apply
	}
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), service.Databases{st.Name(): d}, quiet))
	t.Cleanup(srv.Close)
	return srv.URL
}

func write(t *testing.T, st *store.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		op := wal.Op{Type: wal.OpSet, Key: []byte(fmt.Sprintf("%s%04d", prefix, i)), Value: []byte{byte(i)}}
		if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{op}}); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs a bridge counting in m until the returned stop is called;
// stop returns Run's error. done is closed when Run returned, err is then
// its error.
func run(t *testing.T, src, dst string, m *bridge.Metrics) (stop func() error, done <-chan struct{}, err *error) {
	t.Helper()
	b, e := New(Config{Source: src, Target: dst, Database: "default", Timeout: 10 * time.Second, Log: quiet, Metrics: m})
	if e != nil {
		t.Fatal(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	var res error
	go func() {
		defer close(ch)
		res = b.Run(ctx)
	}()
	stop = func() error {
		cancel()
		<-ch
		return res
	}
	t.Cleanup(func() { stop() })
	return stop, ch, &res
}

func waitGauge(t *testing.T, name string, g prometheus.Collector, want float64) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); testutil.ToFloat64(g) != want; {
		if time.Now().After(deadline) {
			t.Fatalf("qs_bridge_%s = %v, want %v", name, testutil.ToFloat64(g), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitHead(t *testing.T, dst, src *store.Store) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		a, err := src.Head()
		if err != nil {
			t.Fatal(err)
		}
		b, err := dst.Head()
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("target head %d %x, source %d %x", b.Index, b.Hash[:6], a.Index, a.Hash[:6])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBridgeCopiesTheLogVerbatim: the target ends with the source's head
// (same index, same chain hash), and a bridge started again resumes from
// the target's head while the source went on.
func TestBridgeCopiesTheLogVerbatim(t *testing.T) {
	src := openStore(t, store.DBID{})
	dst := openStore(t, src.DBID())
	srcAddr, dstURL := serveRepl(t, src), serveTarget(t, dst, true)
	write(t, src, "a/", 30)
	m := bridge.NewMetrics()
	stop, _, _ := run(t, srcAddr, dstURL, m)
	waitHead(t, dst, src)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	write(t, src, "b/", 30)
	stop, _, _ = run(t, srcAddr, dstURL, m)
	write(t, src, "c/", 30)
	waitHead(t, dst, src)
	// The metrics say where the target is, and that it is caught up.
	waitGauge(t, "position", m.Position, float64(dst.AppliedIndex()))
	waitGauge(t, "lag_entries", m.LagEntries, 0)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	a, _ := src.Digest()
	b, _ := dst.Digest()
	if a != b {
		t.Fatalf("digests differ: %+v %+v", a, b)
	}
}

// TestBridgeRefusesDivergedTarget: a target that took a write of its own
// is refused, counted, and left as it was.
func TestBridgeRefusesDivergedTarget(t *testing.T) {
	src := openStore(t, store.DBID{})
	dst := openStore(t, src.DBID())
	write(t, src, "a/", 5)
	write(t, dst, "own/", 2)
	before, _ := dst.Head()
	m := bridge.NewMetrics()
	_, done, res := run(t, serveRepl(t, src), serveTarget(t, dst, true), m)
	select {
	case <-done:
		if err := *res; !errors.Is(err, ErrDiverged) {
			t.Fatalf("Run: %v, want ErrDiverged", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the bridge went on with a diverged target")
	}
	if got := testutil.ToFloat64(m.Errors.WithLabelValues("diverged")); got != 1 {
		t.Fatalf("errors_total{kind=diverged} = %v, want 1", got)
	}
	if after, _ := dst.Head(); after != before {
		t.Fatalf("the diverged target changed: %+v, was %+v", after, before)
	}
}

// TestBridgeRefusesWrongTargets: a target of another database, and one
// that is not bridged, stop the bridge with ErrConfig, counted.
func TestBridgeRefusesWrongTargets(t *testing.T) {
	src := openStore(t, store.DBID{})
	write(t, src, "a/", 3)
	srcAddr := serveRepl(t, src)
	for name, dstURL := range map[string]string{
		"another database": serveTarget(t, openStore(t, store.DBID{}), true),
		"not bridged":      serveTarget(t, openStore(t, src.DBID()), false),
	} {
		t.Run(name, func(t *testing.T) {
			m := bridge.NewMetrics()
			_, done, res := run(t, srcAddr, dstURL, m)
			select {
			case <-done:
				if err := *res; !errors.Is(err, ErrConfig) {
					t.Fatalf("Run: %v, want ErrConfig", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the bridge went on")
			}
			if got := testutil.ToFloat64(m.Errors.WithLabelValues("config")); got != 1 {
				t.Fatalf("errors_total{kind=config} = %v, want 1", got)
			}
		})
	}
}

// TestBridgesCountApart: two bridges of one process, each given its own
// Metrics, count apart: the one refused by a diverged target counts the
// error, the other, which copies its target up to the source's head,
// counts its position and no error.
func TestBridgesCountApart(t *testing.T) {
	src := openStore(t, store.DBID{})
	write(t, src, "a/", 5)
	good, bad := openStore(t, src.DBID()), openStore(t, src.DBID())
	write(t, bad, "own/", 2)
	srcAddr := serveRepl(t, src)
	mGood, mBad := bridge.NewMetrics(), bridge.NewMetrics()
	stop, _, _ := run(t, srcAddr, serveTarget(t, good, true), mGood)
	_, done, _ := run(t, srcAddr, serveTarget(t, bad, true), mBad)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the bridge went on with a diverged target")
	}
	waitHead(t, good, src)
	waitGauge(t, "position", mGood.Position, float64(good.AppliedIndex()))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(mBad.Errors.WithLabelValues("diverged")); got != 1 {
		t.Fatalf("the refused bridge counted errors_total{kind=diverged} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(mGood.Errors.WithLabelValues("diverged")); got != 0 {
		t.Fatalf("the bridge that copied counted errors_total{kind=diverged} = %v, want 0", got)
	}
	if got := testutil.ToFloat64(mBad.Position); got == float64(good.AppliedIndex()) {
		t.Fatalf("the refused bridge's position is the other's (%v)", got)
	}
}

// TestTargetRefusesEntriesThatDoNotFollow: the bridged root refuses a
// batch that skips an entry, and one it already holds, with
// condition_failed and its applied index; its head does not move.
func TestTargetRefusesEntriesThatDoNotFollow(t *testing.T) {
	src := openStore(t, store.DBID{})
	dst := openStore(t, src.DBID())
	write(t, src, "a/", 4)
	log, err := src.ReadLog(1, 100, 1<<20)
	if err != nil || len(log) != 4 {
		t.Fatalf("source log: %d entries, %v", len(log), err)
	}
	tg := newTarget(serveTarget(t, dst, true), "default", "", &http.Client{Timeout: 10 * time.Second})
	ctx := context.Background()
	if _, err := tg.appendEntries(ctx, log[:2]); err != nil {
		t.Fatal(err)
	}
	for name, es := range map[string][]wal.Entry{"a gap": log[3:], "held already": log[1:3]} {
		_, err := tg.appendEntries(ctx, es)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Code != "condition_failed" || ae.Applied == nil || *ae.Applied != 2 {
			t.Fatalf("%s: %v, want condition_failed at applied index 2", name, err)
		}
	}
	h, err := tg.head(ctx)
	if err != nil || h.Index != 2 || h.Hash != log[1].Hash || h.DBID != src.DBID() || !h.Bridged {
		t.Fatalf("head %+v, %v", h, err)
	}
}

// TestParseHeadRefusesBadAnswers: answers without an id, an index or a
// whole hash are errors, not a head at 0.
func TestParseHeadRefusesBadAnswers(t *testing.T) {
	good := `{"db_id":"00112233445566778899aabbccddeeff","index":3,"hash":"` + fmt.Sprintf("%064x", 7) + `","bridged":true}`
	if h, err := parseHead([]byte(good)); err != nil || h.Index != 3 || !h.Bridged {
		t.Fatalf("good answer: %+v, %v", h, err)
	}
	for _, bad := range []string{
		`not json`,
		`{"index":3,"hash":"` + fmt.Sprintf("%064x", 7) + `"}`,
		`{"db_id":"00112233445566778899aabbccddeeff","hash":"` + fmt.Sprintf("%064x", 7) + `"}`,
		`{"db_id":"00112233445566778899aabbccddeeff","index":3,"hash":"abcd"}`,
	} {
		if _, err := parseHead([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestTargetRefusesBadBodies: a body that is not one entries message, and
// entries sent to a root that is not bridged, are refused with
// bad_request; nothing is written.
func TestTargetRefusesBadBodies(t *testing.T) {
	src := openStore(t, store.DBID{})
	write(t, src, "a/", 1)
	log, err := src.ReadLog(1, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var entries, progress bytes.Buffer
	repl.WriteMessage(&entries, &repl.Entries{Entries: log})
	repl.WriteMessage(&progress, &repl.Progress{AppliedIndex: 1})
	bridged := openStore(t, src.DBID())
	plain := openStore(t, src.DBID())
	for name, tc := range map[string]struct {
		url  string
		body []byte
	}{
		"garbage":     {serveTarget(t, bridged, true), []byte("not a frame")},
		"cut short":   {serveTarget(t, bridged, true), entries.Bytes()[:entries.Len()-3]},
		"progress":    {serveTarget(t, bridged, true), progress.Bytes()},
		"not bridged": {serveTarget(t, plain, false), entries.Bytes()},
	} {
		resp, err := http.Post(tc.url+"/v1/default/bridge", "application/octet-stream", bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"bad_request"`) {
			t.Errorf("%s: %d %s, want 400 bad_request", name, resp.StatusCode, body)
		}
	}
	if bridged.AppliedIndex() != 0 || plain.AppliedIndex() != 0 {
		t.Fatalf("refused bodies were applied: %d, %d", bridged.AppliedIndex(), plain.AppliedIndex())
	}
}
