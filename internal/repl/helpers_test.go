package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestMain fails the package if any goroutine started by this package
// outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedGoroutines(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "internal/repl.") && !strings.Contains(g, "leakedGoroutines") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testLogger logs to the test output only when -v.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return quiet
}

// dbName gives each test its own database name, unique in the process
// (across -count runs too).
func dbName(t *testing.T) string {
	return fmt.Sprintf("%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), dbSeq.Add(1))
}

var dbSeq atomic.Int64

// testMetrics holds the Metrics of each test that asked for one
// (*testing.T → *Metrics).
var testMetrics sync.Map

// metricsOf returns the Metrics of test t: the servers and replicas that
// startServer and startReplica start for t count in it, as those of one
// process share one, and t reads its counts there. A subtest has its own.
func metricsOf(t *testing.T) *Metrics {
	if m, ok := testMetrics.Load(t); ok {
		return m.(*Metrics)
	}
	m, loaded := testMetrics.LoadOrStore(t, NewMetrics())
	if !loaded {
		t.Cleanup(func() { testMetrics.Delete(t) })
	}
	return m.(*Metrics)
}

func openStore(t *testing.T, dir string, name string, id store.DBID, ret store.Retention) *store.Store {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := store.Open(store.Options{Name: name, Dir: dir, DBID: id, MinFreeBytes: 1, BallastBytes: -1,
		Retention: ret, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func startServer(t *testing.T, st *store.Store, pid ProcessID, tweak func(*ServerConfig)) string {
	t.Helper()
	cfg := ServerConfig{ProcessID: pid, ProgressInterval: 50 * time.Millisecond, HandshakeTimeout: 2 * time.Second, WriteTimeout: 5 * time.Second,
		Metrics: metricsOf(t)}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(cfg, func(db string) (*store.Store, bool) {
		return st, db == st.Name()
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("serve returned %v", err)
		}
	})
	return ln.Addr().String()
}

// startReplica runs a replica until the returned stop function is called
// (also at cleanup).
func startReplica(t *testing.T, st *store.Store, pid ProcessID, sources []string, tweak func(*ReplicaConfig)) (*Replica, func()) {
	t.Helper()
	cfg := ReplicaConfig{Sources: sources, ProcessID: pid, IdleTimeout: 2 * time.Second,
		HandshakeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Metrics: metricsOf(t)}
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := NewReplica(cfg, st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("replica Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("replica Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

func write(t *testing.T, st *store.Store, key, value string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := st.Write(ctx, store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(key), Value: []byte(value)}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Index
}

func writeN(t *testing.T, st *store.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		write(t, st, fmt.Sprintf("%s%04d", prefix, i), strings.Repeat(prefix, i%7+1))
		if i%10 == 9 {
			if _, err := st.Heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitCaughtUp(t *testing.T, replica, root *store.Store) {
	t.Helper()
	want := root.AppliedIndex()
	waitFor(t, fmt.Sprintf("replica %s to reach %d", replica.Name(), want), 10*time.Second, func() bool {
		return replica.AppliedIndex() >= want
	})
}

// digest hashes every key, value and index of the data through the public
// read path.
func digest(t *testing.T, s *store.Store) ([32]byte, int) {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.Hash, d.Keys
}

// assertSame checks that two stores have the same applied index, the same
// hash at that index and the same data.
func assertSame(t *testing.T, a, b *store.Store) {
	t.Helper()
	ia, ha, err := appliedHead(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, hb, err := appliedHead(b)
	if err != nil {
		t.Fatal(err)
	}
	if ia != ib || ha != hb {
		t.Fatalf("%s at %d (%s), %s at %d (%s)", a.Name(), ia, ha, b.Name(), ib, hb)
	}
	if !a.AppliedTime().Equal(b.AppliedTime()) {
		t.Fatalf("applied times differ: %v vs %v", a.AppliedTime(), b.AppliedTime())
	}
	da, na := digest(t, a)
	db, nb := digest(t, b)
	if da != db || na != nb {
		t.Fatalf("data differ: %d keys vs %d keys", na, nb)
	}
}

// listen returns a listener on 127.0.0.1 closed at cleanup.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveConns runs handle for each accepted connection until cleanup, and
// waits for the handlers.
func serveConns(t *testing.T, ln net.Listener, handle func(c net.Conn)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// corruptingProxy forwards connections to target; on the first connection
// it flips one byte of the server's stream at offset flipAt.
func corruptingProxy(t *testing.T, target string, flipAt int) (addr string, flipped func() bool) {
	ln := listen(t)
	var mu sync.Mutex
	first, did := true, false
	serveConns(t, ln, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		mu.Lock()
		corrupt := first
		first = false
		mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }() // ends when c or up closes
		buf := make([]byte, 32<<10)
		off := 0
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if corrupt && off <= flipAt && flipAt < off+n {
					buf[flipAt-off] ^= 0x20
					mu.Lock()
					did = true
					mu.Unlock()
				}
				off += n
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	return ln.Addr().String(), func() bool { mu.Lock(); defer mu.Unlock(); return did }
}

// rawSession dials addr, sends h and returns the connection and the first
// answer.
func rawSession(t *testing.T, addr string, h *Hello) (net.Conn, Message) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if err := WriteMessage(c, h); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMessage(c)
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}
