package memcache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/quicksilver-kv/qs/internal/store"
)

// testServer is a Server on 127.0.0.1:0 whose Shutdown is checked at the
// end of the test.
type testServer struct {
	*Server
	addr   string
	served chan error
}

func startServer(t *testing.T, cfg Config, b Backend) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: New(cfg, b, nil), addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { ts.served <- ts.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ts.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case err := <-ts.served:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Serve did not return after Shutdown")
		}
	})
	return ts
}

// client is a raw protocol connection with a bounded life.
type client struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dial(t *testing.T, network, addr string) *client {
	t.Helper()
	nc, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(60 * time.Second)) // a bound on a stuck test, wide enough for a loaded machine
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// expect reads exactly len(want) bytes and compares.
func (c *client) expect(want string) {
	c.t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c.r, got); err != nil {
		c.t.Fatalf("reading %q: got %q, %v", want, got, err)
	}
	if string(got) != want {
		c.t.Fatalf("got %q, want %q", got, want)
	}
}

// expectClosed reads until the server closes the connection, which it
// must do without further input; the bound only stops a stuck test.
func (c *client) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	rest, err := io.ReadAll(c.r)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		c.t.Fatalf("connection not closed: %v (read %q)", err, rest)
	}
	if len(rest) > 0 {
		c.t.Fatalf("unexpected bytes before close: %q", rest)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTCPRaw(t *testing.T) { forIOModes(t, testTCPRaw) }

func testTCPRaw(t *testing.T, threads int) {
	ts := startServer(t, withThreads(Config{}, threads), newFakeBackend())
	c := dial(t, "tcp", ts.addr)
	// Pipelined, and split at awkward places.
	c.send("set a 0 0 5\r\nhel")
	time.Sleep(10 * time.Millisecond)
	c.send("lo\r\nget a b\r\nge")
	time.Sleep(10 * time.Millisecond)
	c.send("ts a\r\ndelete a\r\nget a\r\nversion\r\n")
	c.expect("STORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\nVALUE a 0 5 1\r\nhello\r\nEND\r\nDELETED\r\nEND\r\n" + versionReply)
	c.send("quit\r\n")
	c.expectClosed()
}

func TestGomemcache(t *testing.T) {
	b := newFakeBackend()
	ts := startServer(t, Config{}, b)
	mc := gomemcache.New(ts.addr)
	mc.Timeout = 5 * time.Second
	if err := mc.Set(&gomemcache.Item{Key: "k", Value: []byte("v1")}); err != nil {
		t.Fatalf("Set: %v", err)
	}
	it, err := mc.Get("k")
	if err != nil || string(it.Value) != "v1" || it.Flags != 0 {
		t.Fatalf("Get = %+v, %v", it, err)
	}
	if _, err := mc.Get("missing"); !errors.Is(err, gomemcache.ErrCacheMiss) {
		t.Fatalf("Get(missing) = %v, want ErrCacheMiss", err)
	}
	// Hundreds of keys in one request.
	var keys []string
	for i := range 500 {
		k := fmt.Sprintf("key-%03d", i)
		keys = append(keys, k)
		if i%2 == 0 {
			b.put(k, strings.Repeat("x", i))
		}
	}
	items, err := mc.GetMulti(keys)
	if err != nil {
		t.Fatalf("GetMulti: %v", err)
	}
	if len(items) != 250 {
		t.Fatalf("GetMulti found %d keys, want 250", len(items))
	}
	for k, it := range items {
		var i int
		fmt.Sscanf(k, "key-%d", &i)
		if i%2 != 0 || string(it.Value) != strings.Repeat("x", i) {
			t.Fatalf("GetMulti[%s] = %q", k, it.Value)
		}
	}
	if err := mc.Delete("k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := mc.Delete("k"); !errors.Is(err, gomemcache.ErrCacheMiss) {
		t.Fatalf("second Delete = %v, want ErrCacheMiss", err)
	}
	// Refusals reach the client as errors and leave the connection usable.
	if err := mc.Set(&gomemcache.Item{Key: "k", Value: []byte("v"), Flags: 3}); err != nil {
		t.Fatalf("Set with flags: %v", err)
	}
	if it, err := mc.Get("k"); err != nil || it.Flags != 3 || string(it.Value) != "v" {
		t.Fatalf("Get after Set with flags = %+v, %v", it, err)
	}
	if err := mc.Set(&gomemcache.Item{Key: "k", Value: []byte("v"), Expiration: 60}); err != nil {
		t.Fatalf("Set with expiration: %v", err)
	}
	if err := mc.Add(&gomemcache.Item{Key: "key-002", Value: []byte("v")}); !errors.Is(err, gomemcache.ErrNotStored) {
		t.Fatalf("Add of a present key = %v, want ErrNotStored", err)
	}
	if err := mc.Set(&gomemcache.Item{Key: "k", Value: make([]byte, 2<<20)}); err == nil {
		t.Fatal("Set of 2 MiB succeeded")
	}
	b.mu.Lock()
	b.setErr = fmt.Errorf("forward to root: %w", store.ErrNotRoot)
	b.mu.Unlock()
	if err := mc.Set(&gomemcache.Item{Key: "k", Value: []byte("v")}); err == nil || !strings.Contains(err.Error(), "only at the root") {
		t.Fatalf("Set on a replica = %v", err)
	}
	if it, err := mc.Get("key-002"); err != nil || string(it.Value) != "xx" {
		t.Fatalf("Get after refusals = %+v, %v", it, err)
	}
	if err := mc.Ping(); err != nil {
		t.Fatalf("Ping (version): %v", err)
	}
}

func TestUnixSocket(t *testing.T) { forIOModes(t, testUnixSocket) }

func testUnixSocket(t *testing.T, threads int) {
	path := filepath.Join(t.TempDir(), "mc.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, withThreads(Config{}, threads), newFakeBackend()) // also serves TCP
	go ts.Serve(ln)
	waitFor(t, "unix listener", func() bool {
		nc, err := net.Dial("unix", path)
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	mc := gomemcache.New(path)
	mc.Timeout = 5 * time.Second
	if err := mc.Set(&gomemcache.Item{Key: "u", Value: []byte("over unix")}); err != nil {
		t.Fatalf("Set: %v", err)
	}
	// Written over Unix, read over TCP: one server, one backend.
	c := dial(t, "tcp", ts.addr)
	c.send("get u\r\n")
	c.expect("VALUE u 0 9\r\nover unix\r\nEND\r\n")
	u := dial(t, "unix", path)
	u.send("gets u\r\n")
	u.expect("VALUE u 0 9 1\r\nover unix\r\nEND\r\n")
}

func TestSlowLoris(t *testing.T) { forIOModes(t, testSlowLoris) }

func testSlowLoris(t *testing.T, threads int) {
	const timeout = 300 * time.Millisecond
	ts := startServer(t, withThreads(Config{RequestTimeout: timeout}, threads), newFakeBackend())

	// Half a line, then silence.
	c := dial(t, "tcp", ts.addr)
	start := time.Now()
	c.send("get a")
	c.expectClosed()
	if d := time.Since(start); d < timeout-50*time.Millisecond {
		t.Errorf("closed after %v, before RequestTimeout %v", d, timeout)
	}

	// A byte at a time, faster than any idle timeout but never finishing:
	// the deadline runs from the first byte.
	c = dial(t, "tcp", ts.addr)
	start = time.Now()
	done := make(chan struct{})
	var trickled atomic.Bool // every byte went out: the server never closed
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			if _, err := c.nc.Write([]byte("g")); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		trickled.Store(true)
	}()
	// The trickle lasts 2s; a server that ran the deadline from the last
	// byte would keep the connection until the writer stops. (The writer
	// also stops early, at its first write after the close.)
	c.expectClosed()
	<-done
	if trickled.Load() {
		t.Errorf("trickling client kept until it stopped sending")
	}

	// A data block that never completes.
	c = dial(t, "tcp", ts.addr)
	c.send("set a 0 0 10\r\n01234")
	c.expectClosed()

	if got := counterValue(ts.m.errorsByKind[kindTimeout]); got != 3 {
		t.Errorf("errors_total{kind=timeout} %v, want 3", got)
	}
	// A prompt client is unaffected.
	c = dial(t, "tcp", ts.addr)
	for range 3 {
		time.Sleep(timeout / 2)
		c.send("version\r\n")
		c.expect(versionReply)
	}
}

func TestIdleTimeout(t *testing.T) { forIOModes(t, testIdleTimeout) }

func testIdleTimeout(t *testing.T, threads int) {
	ts := startServer(t, withThreads(Config{IdleTimeout: 200 * time.Millisecond}, threads), newFakeBackend())
	c := dial(t, "tcp", ts.addr)
	c.send("version\r\n")
	c.expect(versionReply)
	start := time.Now()
	c.expectClosed()
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("idle connection closed after %v", d)
	}
}

func TestTooManyConnections(t *testing.T) { forIOModes(t, testTooManyConnections) }

func testTooManyConnections(t *testing.T, threads int) {
	ts := startServer(t, withThreads(Config{MaxConns: 2}, threads), newFakeBackend())
	allIdle := func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		for c := range ts.mu.conns {
			if _, idle := c.idleSince(); !idle {
				return false
			}
		}
		return true
	}
	var c1, c2 *client
	for _, c := range []**client{&c1, &c2} {
		*c = dial(t, "tcp", ts.addr)
		(*c).send("version\r\n")
		(*c).expect(versionReply)
		waitFor(t, "the connections to wait for a request", allIdle)
	}
	// Both wait for a request: the one idle longest, c1, makes room.
	c3 := dial(t, "tcp", ts.addr)
	c1.expectClosed()
	c3.send("version\r\n")
	c3.expect(versionReply)
	c2.send("version\r\n")
	c2.expect(versionReply)
	if got := counterValue(ts.m.idleEvictionsTotal); got != 1 {
		t.Errorf("idle_evictions_total %v, want 1", got)
	}
	waitFor(t, "the evicted connection to go", func() bool { return ts.stats.currConns.Load() == 2 })

	// When every connection is inside a request, a new one is refused.
	c2.send("get a") // a request begun, not finished
	c3.send("get b")
	waitFor(t, "both connections to be inside a request", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		for c := range ts.mu.conns {
			if _, idle := c.idleSince(); idle {
				return false
			}
		}
		return len(ts.mu.conns) == 2
	})
	c4 := dial(t, "tcp", ts.addr)
	c4.expect("SERVER_ERROR too many connections\r\n")
	c4.expectClosed()
	if got := counterValue(ts.m.errorsByKind[kindTooManyConns]); got != 1 {
		t.Errorf("errors_total{kind=too_many_conns} %v, want 1", got)
	}
	c2.send("\r\n")
	c2.expect("END\r\n")
}

func TestLineTooLongTCP(t *testing.T) { forIOModes(t, testLineTooLongTCP) }

func testLineTooLongTCP(t *testing.T, threads int) {
	ts := startServer(t, withThreads(Config{}, threads), newFakeBackend())
	c := dial(t, "tcp", ts.addr)
	go c.nc.Write([]byte("get " + strings.Repeat("k", 3<<20) + "\r\nversion\r\n"))
	c.expect("CLIENT_ERROR line too long\r\n")
	c.expectClosed()
	if got := counterValue(ts.m.errorsByKind[kindLineTooLong]); got != 1 {
		t.Errorf("errors_total{kind=line_too_long} %v, want 1", got)
	}
}

func TestOversizedValueTCP(t *testing.T) { forIOModes(t, testOversizedValueTCP) }

func testOversizedValueTCP(t *testing.T, threads int) {
	ts := startServer(t, withThreads(Config{}, threads), newFakeBackend())
	c := dial(t, "tcp", ts.addr)
	// Over MaxValueBytes, under MaxSwallowBytes: refused, skipped, usable.
	big := strings.Repeat("x", 2<<20)
	go c.nc.Write([]byte("set a 0 0 " + fmt.Sprint(len(big)) + "\r\n" + big + "\r\nget a\r\n"))
	c.expect("SERVER_ERROR object too large for cache\r\nEND\r\n")
	// At exactly MaxValueBytes: stored.
	max := strings.Repeat("y", 1<<20)
	go c.nc.Write([]byte("set a 0 0 " + fmt.Sprint(len(max)) + "\r\n" + max + "\r\nget a\r\n"))
	c.expect("STORED\r\nVALUE a 0 1048576\r\n" + max + "\r\nEND\r\n")

	// Over MaxSwallowBytes: refused and closed.
	ts2 := startServer(t, withThreads(Config{MaxValueBytes: 1 << 10, MaxSwallowBytes: 4 << 10}, threads), newFakeBackend())
	c = dial(t, "tcp", ts2.addr)
	go c.nc.Write([]byte("set a 0 0 " + fmt.Sprint(len(big)) + "\r\n" + big + "\r\nget a\r\n"))
	c.expect("SERVER_ERROR object too large for cache\r\n")
	c.expectClosed()
}

// TestWriteTimeout: a client that sends requests but never reads replies is
// disconnected after WriteTimeout.
func TestWriteTimeout(t *testing.T) { forIOModes(t, testWriteTimeout) }

func testWriteTimeout(t *testing.T, threads int) {
	b := newFakeBackend()
	b.put("big", strings.Repeat("z", 1<<20))
	ts := startServer(t, withThreads(Config{WriteTimeout: 200 * time.Millisecond}, threads), b)
	c := dial(t, "tcp", ts.addr)
	go func() {
		for range 200 {
			if _, err := c.nc.Write([]byte("get big\r\n")); err != nil {
				return
			}
		}
	}()
	waitFor(t, "the server to drop the connection", func() bool {
		return ts.stats.currConns.Load() == 0 && ts.stats.totalConns.Load() == 1
	})
	if got := counterValue(ts.m.errorsByKind[kindTimeout]); got != 1 {
		t.Errorf("errors_total{kind=timeout} %v, want 1", got)
	}
}

func TestShutdownWaitsForInFlight(t *testing.T) {
	b := newFakeBackend()
	entered, release := make(chan struct{}), make(chan struct{})
	b.setHook = func(ctx context.Context) error {
		close(entered)
		<-release
		return nil
	}
	s := New(Config{}, b, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	idle := dial(t, "tcp", ln.Addr().String())
	idle.send("version\r\n")
	idle.expect(versionReply)
	busy := dial(t, "tcp", ln.Addr().String())
	busy.send("set k 0 0 1\r\nx\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The listener closes and the idle connection is let go at once.
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	idle.expectClosed()
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("listener still accepts after Shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a write in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	busy.expect("STORED\r\n")
	busy.expectClosed()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Shutdown did not return after the write finished")
	}
	if err := s.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v", err)
	}
}

func TestShutdownForcesAfterDeadline(t *testing.T) { forIOModes(t, testShutdownForcesAfterDeadline) }

func testShutdownForcesAfterDeadline(t *testing.T, threads int) {
	b := newFakeBackend()
	entered := make(chan struct{})
	canceled := make(chan struct{})
	b.setHook = func(ctx context.Context) error {
		close(entered)
		<-ctx.Done() // a durable write that never completes on its own
		close(canceled)
		return ctx.Err()
	}
	ts := startServer(t, withThreads(Config{}, threads), b)
	c := dial(t, "tcp", ts.addr)
	c.send("set k 0 0 1\r\nx\r\n")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("forced Shutdown took %v", d)
	}
	select {
	case <-canceled:
	default:
		t.Error("the backend write's context was not canceled")
	}
	if n := ts.stats.currConns.Load(); n != 0 {
		t.Errorf("%d connections left after Shutdown", n)
	}
}

// TestShutdownLeavesNoGoroutines runs a server on TCP and Unix listeners
// with connections in every state, shuts it down and counts goroutines.
func TestShutdownLeavesNoGoroutines(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close() // Go's network poller keeps its descriptors once started
	}
	fdsBefore, fdsKnown := openFiles()
	before := runtime.NumGoroutine()
	func() {
		b := newFakeBackend()
		s := New(Config{}, b, nil)
		tcp, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		unix, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
		if err != nil {
			t.Fatal(err)
		}
		var serving sync.WaitGroup
		for _, ln := range []net.Listener{tcp, unix} {
			serving.Add(1)
			go func() {
				defer serving.Done()
				s.Serve(ln)
			}()
		}
		var conns []net.Conn
		for i, ln := range []net.Listener{tcp, unix, tcp, unix, tcp} {
			nc, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, nc)
			switch i {
			case 0, 1: // served a request, now idle
				fmt.Fprintf(nc, "set k%d 0 0 1\r\nx\r\n", i)
				if line, err := bufio.NewReader(nc).ReadString('\n'); err != nil || line != "STORED\r\n" {
					t.Fatalf("set: %q %v", line, err)
				}
			case 2: // half a request
				io.WriteString(nc, "get k")
			case 3: // half a data block
				io.WriteString(nc, "set k 0 0 10\r\nabc")
			case 4: // connected, nothing sent
			}
		}
		waitFor(t, "connections to register", func() bool { return s.stats.currConns.Load() == 5 })
		// Requests started by a byte that never complete hold up Shutdown
		// until its deadline; the rest go at once.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown = %v, want DeadlineExceeded (two requests never completed)", err)
		}
		serving.Wait()
		for _, nc := range conns {
			nc.Close()
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after Shutdown:\n%s",
				before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every socket is closed, the event loops' own descriptors included
	// (they hold duplicates of their connections' sockets).
	if fds, ok := openFiles(); fdsKnown && ok && fds > fdsBefore {
		t.Errorf("%d open files before, %d after Shutdown", fdsBefore, fds)
	}
}

// openFiles counts the process's open files; false where it cannot
// (no /proc/self/fd).
func openFiles() (int, bool) {
	es, err := os.ReadDir("/proc/self/fd")
	return len(es), err == nil
}

// TestShutdownGracefulIsQuick: with only idle connections, Shutdown returns
// at once, well before any timeout.
// TestShutdownDropsPipelinedAfterGivenUpSet: a set given up at a forced
// shutdown may still be committed by the store, which reads its value from
// the connection's buffer; the sets pipelined behind it in that buffer are
// never started (starting one would read or move bytes in it).
func TestShutdownDropsPipelinedAfterGivenUpSet(t *testing.T) {
	forIOModes(t, testShutdownDropsPipelinedAfterGivenUpSet)
}

func testShutdownDropsPipelinedAfterGivenUpSet(t *testing.T, threads int) {
	b := newFakeBackend()
	var calls atomic.Int32
	entered := make(chan struct{})
	b.setHook = func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			close(entered)
			<-ctx.Done() // a durable write that never completes on its own
		}
		return ctx.Err()
	}
	ts := startServer(t, withThreads(Config{}, threads), b)
	c := dial(t, "tcp", ts.addr)
	c.send("set a 0 0 1\r\nx\r\nset b 0 0 1\r\ny\r\nset c 0 0 40\r\n" + strings.Repeat("z", 40) + "\r\n")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the backend saw %d sets, want only the one given up", n)
	}
}

func TestShutdownGracefulIsQuick(t *testing.T) { forIOModes(t, testShutdownGracefulIsQuick) }

func testShutdownGracefulIsQuick(t *testing.T, threads int) {
	ts := startServer(t, withThreads(Config{}, threads), newFakeBackend())
	var cs []*client
	for range 20 {
		c := dial(t, "tcp", ts.addr)
		c.send("version\r\n")
		c.expect(versionReply)
		cs = append(cs, c)
	}
	// Idle connections are closed at once, not after their idle timeout
	// (5 minutes): Shutdown returns well inside its minute.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	for _, c := range cs {
		c.expectClosed()
	}
}

// forIOModes runs test once with connections on dedicated threads, once
// through the network poller (Config.Threads -1) and once in event loops
// (modeLoops, on Linux).
func forIOModes(t *testing.T, test func(t *testing.T, threads int)) {
	for _, m := range []struct {
		name    string
		threads int
	}{{"thread", 0}, {"poller", -1}, {"loop", modeLoops}} {
		if m.threads == modeLoops && runtime.GOOS != "linux" {
			continue
		}
		t.Run(m.name, func(t *testing.T) { test(t, m.threads) })
	}
}

// modeLoops, passed as threads to withThreads, serves connections in two
// event loops; the other values are Config.Threads with the loops off.
const modeLoops = -100

func withThreads(cfg Config, threads int) Config {
	if threads == modeLoops {
		cfg.EventLoops = 2
		return cfg
	}
	cfg.Threads = threads
	cfg.EventLoops = -1
	return cfg
}
