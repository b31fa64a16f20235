package memcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func skipUnlessLoops(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("event loops are Linux only")
	}
}

// parkedConns counts the connections of ts waiting in an event loop.
func parkedConns(ts *testServer) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for c := range ts.mu.conns {
		c.mu.Lock()
		if c.mu.parked && c.mu.idle {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// dialParked connects to ts and waits until the connection is parked in
// its loop (a new connection is first served on a goroutine), with n
// connections parked in all.
func dialParked(t *testing.T, ts *testServer, n int) *client {
	t.Helper()
	c := dial(t, "tcp", ts.addr)
	waitParked(t, ts, n)
	return c
}

func waitParked(t *testing.T, ts *testServer, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d connections parked in their loops", n), func() bool { return parkedConns(ts) == n })
}

// TestLoopServesPipelinedGets: gets pipelined in one write are answered in
// order from the loop, with writes, meta and binary requests among them
// handed to a goroutine and the connection parked again afterwards.
func TestLoopServesPipelinedGets(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	b.put("a", "1")
	b.put("b", "22")
	ts := startServer(t, Config{EventLoops: 2}, b)
	c := dialParked(t, ts, 1)
	c.send("get a\r\nget b a\r\ngets nope\r\n")
	c.expect("VALUE a 0 1\r\n1\r\nEND\r\nVALUE b 0 2\r\n22\r\nVALUE a 0 1\r\n1\r\nEND\r\nEND\r\n")
	waitParked(t, ts, 1)
	if n := counterValue(ts.m.loopHandoffsTotal); n != 0 {
		t.Errorf("loop_handoffs_total %v after gets only, want 0", n)
	}

	c.send("get a\r\nset k 0 0 3\r\nxyz\r\nget k\r\nmg k v\r\n" + binReq(opGet, "b", "", "", 0, 7) + "get a\r\n")
	c.expect("VALUE a 0 1\r\n1\r\nEND\r\nSTORED\r\nVALUE k 0 3\r\nxyz\r\nEND\r\nVA 3\r\nxyz\r\n")
	hdr := make([]byte, 24+4+2)
	if _, err := io.ReadFull(c.r, hdr); err != nil {
		t.Fatal(err)
	}
	if hdr[0] != 0x81 || string(hdr[28:]) != "22" {
		t.Fatalf("binary get reply % x", hdr)
	}
	c.expect("VALUE a 0 1\r\n1\r\nEND\r\n")
	waitParked(t, ts, 1)
	if n := counterValue(ts.m.loopHandoffsTotal); n < 1 {
		t.Errorf("loop_handoffs_total %v after a set, want at least 1", n)
	}
	if g := gaugeValue(t, ts.m.loopConnections); g != 1 {
		t.Errorf("loop_connections %v, want 1", g)
	}
}

// TestLoopPartialRequests: a get, a set and a get's keys that arrive a few
// bytes at a time are served whole.
func TestLoopPartialRequests(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	b.put("key1", "v1")
	ts := startServer(t, Config{EventLoops: 1}, b)
	c := dialParked(t, ts, 1)
	in := "get key1\r\nset key2 0 0 5\r\nhello\r\nget key1 key2\r\n"
	for i := 0; i < len(in); i += 3 {
		c.send(in[i:min(i+3, len(in))])
		time.Sleep(time.Millisecond) // separate segments, most of the time
	}
	c.expect("VALUE key1 0 2\r\nv1\r\nEND\r\nSTORED\r\nVALUE key1 0 2\r\nv1\r\nVALUE key2 0 5\r\nhello\r\nEND\r\n")
	waitParked(t, ts, 1)
}

// TestLoopLargeReplies: replies larger than the socket takes at once are
// finished by a goroutine (the client reads them slowly), and the
// connection goes back to its loop for the next get.
func TestLoopLargeReplies(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	big := strings.Repeat("x", 900<<10)
	b.put("big", big)
	b.put("small", "s")
	ts := startServer(t, Config{EventLoops: 1}, b)
	c := dialParked(t, ts, 1)
	c.nc.SetDeadline(time.Now().Add(60 * time.Second))
	// 18 MB: more than the socket buffers hold, so that the loop's write
	// stops short and a goroutine finishes it.
	c.send("get" + strings.Repeat(" big", 20) + "\r\nget small\r\n")
	time.Sleep(20 * time.Millisecond) // let the socket buffers fill
	want := strings.Repeat("VALUE big 0 921600\r\n"+big+"\r\n", 20) + "END\r\nVALUE small 0 1\r\ns\r\nEND\r\n"
	got := make([]byte, len(want))
	n, err := io.ReadFull(c.r, got)
	if err != nil || string(got) != want {
		i := 0
		for i < n && got[i] == want[i] {
			i++
		}
		t.Fatalf("read %d of %d bytes (%v); the first %d are right", n, len(want), err, i)
	}
	waitParked(t, ts, 1)
	c.send("get small\r\n")
	c.expect("VALUE small 0 1\r\ns\r\nEND\r\n")
}

// TestLoopClosedConnections: connections that close while parked, in the
// middle of a request, or right after sending gets are all forgotten, and
// the loop serves new ones.
func TestLoopClosedConnections(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	b.put("k", "v")
	ts := startServer(t, Config{EventLoops: 1}, b)

	parked := dialParked(t, ts, 1)
	parked.send("get k\r\n")
	parked.expect("VALUE k 0 1\r\nv\r\nEND\r\n")
	waitParked(t, ts, 1)
	midway := dialParked(t, ts, 2)
	midway.send("set k 0 0 10\r\nabc") // handed off, waits for the rest
	unread := dialParked(t, ts, 2)
	unread.send(strings.Repeat("get k\r\n", 1000)) // replies never read
	waitFor(t, "three connections", func() bool { return ts.stats.currConns.Load() == 3 })

	parked.nc.Close()
	midway.nc.Close()
	unread.nc.Close()
	waitFor(t, "the closed connections to go", func() bool {
		return ts.stats.currConns.Load() == 0 && gaugeValue(t, ts.m.loopConnections) == 0
	})
	ts.mu.Lock()
	for _, l := range ts.loops {
		if n := l.count(); n != 0 {
			t.Errorf("a loop still holds %d connections", n)
		}
	}
	ts.mu.Unlock()
	b.mu.Lock()
	got := string(b.data["k"].value)
	b.mu.Unlock()
	if got != "v" {
		t.Errorf("k = %q after an unfinished set, want v", got)
	}

	c := dial(t, "tcp", ts.addr)
	c.send("get k\r\n")
	c.expect("VALUE k 0 1\r\nv\r\nEND\r\n")
}

// TestLoopsShareConnections: connections go to the loop with the fewest,
// and the loops start with the first connection.
func TestLoopsShareConnections(t *testing.T) {
	skipUnlessLoops(t)
	ts := startServer(t, Config{EventLoops: 3}, newFakeBackend())
	ts.mu.Lock()
	started := len(ts.loops)
	ts.mu.Unlock()
	if started != 0 {
		t.Fatalf("%d loops before any connection", started)
	}
	for range 6 {
		c := dial(t, "tcp", ts.addr)
		c.send("version\r\n")
		c.expect(versionReply)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.loops) != 3 {
		t.Fatalf("%d loops, want 3", len(ts.loops))
	}
	for i, l := range ts.loops {
		if n := l.count(); n != 2 {
			t.Errorf("loop %d serves %d connections, want 2", i, n)
		}
	}
}

// TestLoopRefusals: a bad get line on a parked connection is answered
// like anywhere else (by the goroutine it is handed to), counted, and the
// connection keeps working; a line too long closes it.
func TestLoopRefusals(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	b.put("k", "v")
	ts := startServer(t, Config{EventLoops: 1, MaxLineBytes: 1024}, b)
	c := dialParked(t, ts, 1)
	c.send("get " + strings.Repeat("x", 300) + "\r\nget k\r\n")
	c.expect("CLIENT_ERROR bad key: key 1 is longer than 250 bytes\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
	if got := counterValue(ts.m.errorsByKind[kindBadKey]); got != 1 {
		t.Errorf("errors_total{kind=bad_key} %v, want 1", got)
	}
	waitParked(t, ts, 1)
	c.send("get " + strings.Repeat("k ", 600) + "\r\n")
	c.expect("CLIENT_ERROR line too long\r\n")
	c.expectClosed()
}

// TestLoopAnswersLikePoller: byte streams of every kind (bare line feeds,
// empty lines, bad and unknown commands, gets without keys, meta and
// binary requests, noreply) get the same replies from a server with event
// loops as from one serving every connection through the poller, sent
// whole or a byte at a time.
func TestLoopAnswersLikePoller(t *testing.T) {
	skipUnlessLoops(t)
	streams := []string{
		"get a\nget b\n",
		"\r\n\r\nget a\r\n",
		"get\r\nget a\r\n",
		"gets a b c\r\nget a a\r\n",
		"bogus\r\nget a\r\n",
		"GET a\r\nget a\r\n",
		"get  a   b \r\n",
		"get a\r\nset c 0 0 1 noreply\r\nz\r\nget c\r\n",
		"mg a v\r\nget a\r\nmn\r\n",
		binReq(opGet, "a", "", "", 0, 1) + "get b\r\n",
		"get a\r\nversion\r\nget b\r\n",
		"get a\r\nquit\r\nget b\r\n",
		"get a\x00b\r\nget a\r\n",
	}
	serve := func(cfg Config, in string, trickle bool) string {
		b := newFakeBackend()
		b.put("a", "1")
		b.put("b", "22")
		ts := startServer(t, cfg, b)
		c := dial(t, "tcp", ts.addr)
		if cfg.EventLoops > 0 {
			waitParked(t, ts, 1)
		}
		// After quit the server closes, so a write of what follows it may
		// be reset; the replies already sent are still read below.
		closes := strings.Contains(in, "quit\r\n")
		send := func(s string) bool {
			_, err := io.WriteString(c.nc, s)
			if err != nil && !(closes && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))) {
				t.Fatalf("%q: send: %v", in, err)
			}
			return err == nil
		}
		chunks := []string{in}
		if trickle {
			chunks = chunks[:0]
			for i := range len(in) {
				chunks = append(chunks, in[i:i+1])
			}
		}
		// The last request of each stream is answered last; quit closes.
		chunks = append(chunks, "version\r\n")
		for _, s := range chunks {
			if !send(s) {
				break
			}
		}
		c.nc.(*net.TCPConn).CloseWrite()
		c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		out, err := io.ReadAll(c.r)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("%q: reading the replies: %v", in, err)
		}
		return string(out)
	}
	for _, in := range streams {
		want := serve(Config{EventLoops: -1, Threads: -1}, in, false)
		for _, trickle := range []bool{false, true} {
			if got := serve(Config{EventLoops: 1}, in, trickle); got != want {
				t.Errorf("%q (a byte at a time: %v):\nloops  %q\npoller %q", in, trickle, got, want)
			}
		}
	}
}

// holdBeforePark holds the first connection of an event loop that is about
// to park after serving a request, on its way back from its goroutine to
// its loop, until release is called; held reports it. (A new connection
// may park before its first request arrives: that one passes.) Call release in a cleanup registered after
// the server's, so that a failing test does not leave it held.
func holdBeforePark(t *testing.T) (held <-chan *conn, release func()) {
	t.Helper()
	heldc, releasec := make(chan *conn, 1), make(chan struct{})
	var first atomic.Bool
	testHookBeforePark = func(c *conn) {
		if !c.reqStart.IsZero() && first.CompareAndSwap(false, true) {
			heldc <- c
			<-releasec
		}
	}
	t.Cleanup(func() { testHookBeforePark = nil }) // after the server's Shutdown
	var once sync.Once
	return heldc, func() { once.Do(func() { close(releasec) }) }
}

func waitHeld(t *testing.T, held <-chan *conn) *conn {
	t.Helper()
	select {
	case c := <-held:
		return c
	case <-time.After(60 * time.Second):
		t.Fatal("timed out waiting for a connection on its way to its loop")
		return nil
	}
}

// TestLoopEvictsConnectionOnItsWayToLoop: a connection of an event loop
// that waited on its goroutine for its next request in vain and is about
// to park still waits for a request: a new connection at MaxConns evicts
// it rather than being refused.
func TestLoopEvictsConnectionOnItsWayToLoop(t *testing.T) {
	skipUnlessLoops(t)
	held, release := holdBeforePark(t)
	ts := startServer(t, withThreads(Config{MaxConns: 1}, modeLoops), newFakeBackend())
	t.Cleanup(release)
	c1 := dial(t, "tcp", ts.addr)
	c1.send("version\r\n")
	c1.expect(versionReply)
	hc := waitHeld(t, held)
	if _, idle := hc.idleSince(); !idle {
		t.Error("a connection on its way to its loop is not idle")
	}

	c2 := dial(t, "tcp", ts.addr)
	c2.send("version\r\n")
	c2.expect(versionReply)
	release()
	c1.expectClosed()
	if got := counterValue(ts.m.idleEvictionsTotal); got != 1 {
		t.Errorf("idle_evictions_total %v, want 1", got)
	}
	if got := counterValue(ts.m.errorsByKind[kindTooManyConns]); got != 0 {
		t.Errorf("errors_total{kind=too_many_conns} %v, want 0", got)
	}
	waitFor(t, "the evicted connection to go", func() bool { return ts.stats.currConns.Load() == 1 })
	c2.send("version\r\n")
	c2.expect(versionReply)
}

// TestLoopEvictsLongestWaiting: a connection waits for a request from the
// moment it began to, not from when it parked in its loop: of two idle
// connections, the one that began waiting first is evicted for a new one,
// even if it parked last.
func TestLoopEvictsLongestWaiting(t *testing.T) {
	skipUnlessLoops(t)
	held, release := holdBeforePark(t)
	ts := startServer(t, withThreads(Config{MaxConns: 2}, modeLoops), newFakeBackend())
	t.Cleanup(release)
	c1 := dial(t, "tcp", ts.addr)
	c1.send("version\r\n")
	c1.expect(versionReply)
	waitHeld(t, held) // c1 waits for a request, on its way to its loop

	c2 := dial(t, "tcp", ts.addr)
	c2.send("version\r\n")
	c2.expect(versionReply)
	waitParked(t, ts, 1) // c2, which began waiting after c1
	release()
	waitParked(t, ts, 2) // c1 too, parked after c2

	c3 := dial(t, "tcp", ts.addr)
	waitFor(t, "a connection to be evicted", func() bool { return counterValue(ts.m.idleEvictionsTotal) == 1 })
	c2.send("version\r\n")
	c2.expect(versionReply)
	c1.expectClosed()
	c3.send("version\r\n")
	c3.expect(versionReply)
}

// TestLoopEventWithoutRequestKeepsIdle: an event of a parked connection
// that finds nothing to read leaves it waiting for a request, evictable,
// since it began to.
func TestLoopEventWithoutRequestKeepsIdle(t *testing.T) {
	skipUnlessLoops(t)
	ts := startServer(t, withThreads(Config{}, modeLoops), newFakeBackend())
	cl := dial(t, "tcp", ts.addr)
	cl.send("version\r\n")
	cl.expect(versionReply)
	waitParked(t, ts, 1)
	var c *conn
	ts.mu.Lock()
	for x := range ts.mu.conns {
		c = x
	}
	ts.mu.Unlock()
	since, _ := c.idleSince()

	c.loop.lp.ready(c) // as the loop does for an event; nothing was sent
	if got, idle := c.idleSince(); !idle || !got.Equal(since) {
		t.Errorf("after an event without a request: idle %v since %v, want idle since %v", idle, got, since)
	}
	cl.send("get a\r\nversion\r\n")
	cl.expect("END\r\n" + versionReply)
}

// TestLoopConnectionsLeaveGoPoller: a connection of an event loop is
// served through its own descriptor, the accepted net.Conn closed, so
// Go's network poller reports nothing for it (it woke a thread of its own
// for every request of a parked connection); parked, handed off to a
// goroutine and parked again, it is served throughout.
func TestLoopConnectionsLeaveGoPoller(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	b.put("a", "1")
	ts := startServer(t, Config{EventLoops: 1}, b)
	c := dialParked(t, ts, 1)
	c.send("get a\r\n")
	c.expect("VALUE a 0 1\r\n1\r\nEND\r\n")
	c.send("set k 0 0 3\r\nxyz\r\n")
	c.expect("STORED\r\n")
	waitParked(t, ts, 1)
	c.send("get k\r\n")
	c.expect("VALUE k 0 3\r\nxyz\r\nEND\r\n")
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for sc := range ts.mu.conns {
		if sc.loop == nil {
			t.Fatal("connection without a loop")
		}
		if err := sc.nc.SetReadDeadline(time.Time{}); !errors.Is(err, net.ErrClosed) {
			t.Errorf("accepted connection still open (SetReadDeadline: %v): in Go's network poller", err)
		}
	}
}

// TestLoopSlowClientsHoldNoThreads: connections of the event loops stuck
// in the middle of a request (a slow or hostile client) wait without an
// OS thread each: at most pollWaiters of them wait in poll(2), the rest
// in the loop's epoll set. Each is still served once the rest arrives.
func TestLoopSlowClientsHoldNoThreads(t *testing.T) {
	skipUnlessLoops(t)
	const slow = 200
	ts := startServer(t, Config{EventLoops: 1, RequestTimeout: time.Minute}, newFakeBackend())
	cs := make([]*client, slow)
	for i := range cs {
		cs[i] = dial(t, "tcp", ts.addr)
	}
	waitParked(t, ts, slow)
	before, ok := osThreads()
	if !ok {
		t.Skip("no /proc/self/status to count threads from")
	}
	for i, c := range cs {
		c.send(fmt.Sprintf("set k%d 0 0 10\r\nabc", i)) // 7 bytes of the data block missing
	}
	waitFor(t, "every slow connection handed to a goroutine", func() bool {
		return counterValue(ts.m.loopHandoffsTotal) == slow
	})
	time.Sleep(50 * time.Millisecond) // let them reach their waits
	if after, _ := osThreads(); after-before > pollWaiters+20 {
		t.Errorf("%d OS threads before %d connections stopped mid-request, %d after: a thread each", before, slow, after)
	}
	for _, c := range cs {
		c.send("defghij\r\n")
		c.expect("STORED\r\n")
	}
}

// osThreads counts the process's OS threads; false where it cannot.
func osThreads() (int, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil
		}
	}
	return 0, false
}

// TestLoopWaitsInEpollSetWhenPollIsFull: with every poll(2) slot taken,
// goroutines of loop connections wait in the loop's epoll set: for the
// rest of a request, for room to write a large reply, for the next
// request (and then park), and a forced shutdown ends such a wait.
func TestLoopWaitsInEpollSetWhenPollIsFull(t *testing.T) {
	skipUnlessLoops(t)
	b := newFakeBackend()
	big := strings.Repeat("x", 900<<10)
	b.put("big", big)
	s := New(Config{EventLoops: 1}, b, nil)
	for range pollWaiters {
		s.pollSlots <- struct{}{}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	ts := &testServer{Server: s, addr: ln.Addr().String()}

	c := dialParked(t, ts, 1)
	c.nc.SetDeadline(time.Now().Add(60 * time.Second))
	c.send("set k 0 0 10\r\nabc") // the rest later: a read wait
	time.Sleep(10 * time.Millisecond)
	c.send("defghij\r\n")
	c.expect("STORED\r\n")
	waitParked(t, ts, 1) // after a wait for the next request in vain

	c.send("get" + strings.Repeat(" big", 20) + "\r\n") // a write wait
	time.Sleep(20 * time.Millisecond)
	want := strings.Repeat("VALUE big 0 921600\r\n"+big+"\r\n", 20) + "END\r\n"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c.r, got); err != nil || string(got) != want {
		t.Fatalf("large reply: %v", err)
	}
	waitParked(t, ts, 1)

	c.send("set k 0 0 10\r\nabc") // stuck mid-request
	waitFor(t, "the set's goroutine waiting in the loop", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		for sc := range ts.mu.conns {
			sc.mu.Lock()
			w := sc.mu.waiting
			sc.mu.Unlock()
			if w {
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded (a request never completed)", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
	if n := s.stats.currConns.Load(); n != 0 {
		t.Fatalf("%d connections left after a forced shutdown", n)
	}
}
