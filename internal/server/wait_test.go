package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

func TestSourceBackoffDoublesUpToTheCap(t *testing.T) {
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := sourceBackoff(i + 1); got != w {
			t.Errorf("sourceBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := sourceBackoff(1 << 20); got != sourceWaitMax {
		t.Errorf("sourceBackoff(huge) = %v, want the cap %v", got, sourceWaitMax)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startTestServer(t *testing.T, toml string, ctx context.Context) (*Server, *syncBuffer, chan error) {
	t.Helper()
	cfg, err := config.Parse([]byte(toml), "test")
	if err != nil {
		t.Fatal(err)
	}
	announced := &syncBuffer{}
	s, err := newServer(cfg, slog.New(slog.DiscardHandler), announced, privateMeters())
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- s.StartContext(ctx) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s.Shutdown(sctx)
	})
	return s, announced, started
}

func announcedHTTP(t *testing.T, b *syncBuffer) string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(b.String(), "\n") {
			if a, ok := strings.CutPrefix(l, "http listening on "); ok {
				return "http://" + a
			}
		}
	}
	t.Fatal("no http address announced within 60s")
	return ""
}

func getStatus(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestReplicaWaitsInProcess runs the wait and the switch to the real
// handler in one process (so the race detector sees both sides): a new
// replica waits for a source that is not up, then a source (a replication
// server of a root store, with a process id of its own) starts on that
// address, and the replica opens and serves.
func TestReplicaWaitsInProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rootRepl := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	rep, repOut, repStarted := startTestServer(t, fmt.Sprintf("data = %q\nhttp = \"127.0.0.1:0\"\nrepl = \"off\"\n[[database]]\nname = \"default\"\nupstream = [%q]\n",
		filepath.Join(dir, "replica"), rootRepl), context.Background())
	base := announcedHTTP(t, repOut)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, st := getStatus(t, base+"/v1/default/status")
		if code == 200 && st["state"] == "waiting" && st["last_error"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %d %v, want waiting with an error", code, st)
		}
	}
	if code, _ := getStatus(t, base+"/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz while waiting: %d", code)
	}
	// The wait and its failed attempts are counted.
	waiting := rep.meters.server.sourceWaiting.WithLabelValues("default")
	if w, f := testutil.ToFloat64(waiting), testutil.ToFloat64(rep.meters.server.sourceWaitFailures.WithLabelValues("default")); w != 1 || f < 1 {
		t.Fatalf("while waiting: source_waiting %v, source_wait_failures_total %v; want 1 and at least 1", w, f)
	}
	// The status page is served, and what it reads shows the wait.
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("status page while waiting: %d %q", resp.StatusCode, ct)
	}
	if code, node := getStatus(t, base+"/v1/node"); code != 200 || !waitingIn(node, "default") {
		t.Fatalf("GET /v1/node while waiting: %d %v", code, node)
	}

	root, err := store.Open(store.Options{Name: "default", Dir: filepath.Join(dir, "root"), MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	src, err := repl.NewServer(repl.ServerConfig{ProcessID: repl.NewProcessID()}, func(db string) (*store.Store, bool) {
		return root, db == "default"
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", rootRepl)
	if err != nil {
		t.Skipf("the source's address was taken meanwhile: %v", err)
	}
	go src.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		src.Shutdown(ctx)
	})
	select {
	case err := <-repStarted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("replica not started within 60s of its source")
	}
	code, st := getStatus(t, base+"/v1/default/status")
	if code != 200 || st["state"] == "waiting" || st["role"] != "replica" {
		t.Fatalf("status once started: %d %v", code, st)
	}
	if code, _ := getStatus(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz once started: %d", code)
	}
	if w := testutil.ToFloat64(waiting); w != 0 {
		t.Fatalf("source_waiting %v once started, want 0", w)
	}
}

// waitingIn reports whether a GET /v1/node answer lists database db in
// state waiting.
func waitingIn(node map[string]any, db string) bool {
	dbs, _ := node["databases"].([]any)
	for _, d := range dbs {
		m, _ := d.(map[string]any)
		st, _ := m["status"].(map[string]any)
		if m["name"] == db && st["state"] == "waiting" && st["role"] == "replica" {
			return true
		}
	}
	return false
}

// TestWaitEndsWithContext: the wait ends when the start's context does,
// with an error that says so.
func TestWaitEndsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	_, out, started := startTestServer(t, fmt.Sprintf("data = %q\nhttp = \"127.0.0.1:0\"\nrepl = \"off\"\n[[database]]\nname = \"default\"\nupstream = [%q]\n",
		t.TempDir(), addr), ctx)
	announcedHTTP(t, out)
	cancel()
	select {
	case err := <-started:
		if err == nil || !strings.Contains(err.Error(), "stopped while waiting for a source") {
			t.Fatalf("start ended with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("start still waiting 60s after its context ended")
	}
}

func TestPermanentLearnError(t *testing.T) {
	refused := &repl.RefusedError{Code: repl.RefuseUnknownDatabase, Reason: "no such database"}
	connRefused := &net.OpError{Op: "dial", Err: errors.New("connect: connection refused")}
	tlsAlert := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	wrap := func(errs ...error) error { return fmt.Errorf("learn database id: %w", errors.Join(errs...)) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(connRefused), false},
		{wrap(refused), true},
		{wrap(tlsAlert), true},
		{wrap(refused, connRefused), false}, // one source may still come up
		{wrap(refused, tlsAlert), true},
		{wrap(fmt.Errorf("a: %w", x509.UnknownAuthorityError{})), true},
		{wrap(fmt.Errorf("a: %w", io.EOF)), true},
		{wrap(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), true}, // a keyed source
		{wrap(clusterauth.ErrBadKey), true},
		{wrap(clusterauth.ErrBadKey, connRefused), false},
	} {
		if got := permanentLearnError(c.err); got != c.want {
			t.Errorf("permanentLearnError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
