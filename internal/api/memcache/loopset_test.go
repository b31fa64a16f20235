package memcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// startingBackend is a fakeBackend that can start sets (SetStarter).
// While held, started sets wait until release; otherwise each completes
// at once on a goroutine of its own, as the commit pipeline would. The
// value is stored when the set completes, from the slices StartSet was
// given, so a server that reused them too early stores the wrong bytes.
type startingBackend struct {
	*fakeBackend
	mu      sync.Mutex
	hold    bool
	pending []startedSet
	// refuse is returned by StartSet at once; busy makes it report false.
	refuse error
	busy   bool
	// commitErr fails the sets as they complete.
	commitErr error
	started   int
}

type startedSet struct {
	key, value []byte
	a          Attrs
	done       func(uint64, error)
}

func newStartingBackend() *startingBackend {
	return &startingBackend{fakeBackend: newFakeBackend()}
}

func (b *startingBackend) StartSet(key, value []byte, a Attrs, done func(uint64, error)) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.refuse != nil:
		return false, b.refuse
	case b.busy:
		return false, nil
	}
	b.started++
	s := startedSet{key, value, a, done}
	if b.hold {
		b.pending = append(b.pending, s)
		return true, nil
	}
	go b.complete(s, b.commitErr)
	return true, nil
}

func (b *startingBackend) complete(s startedSet, err error) {
	if err != nil {
		s.done(0, err)
		return
	}
	idx, err := b.fakeBackend.Set(context.Background(), s.key, s.value, s.a)
	s.done(idx, err)
}

// release completes the held sets (failing them with err, if not nil).
func (b *startingBackend) release(err error) {
	b.mu.Lock()
	ps := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, s := range ps {
		b.complete(s, err)
	}
}

func (b *startingBackend) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

func (b *startingBackend) value(key string) (string, bool) {
	b.fakeBackend.mu.Lock()
	defer b.fakeBackend.mu.Unlock()
	v, ok := b.data[key]
	return string(v.value), ok
}

// expectNothing checks that no reply is waiting on c.
func (c *client) expectNothing() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	defer c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	if b, err := c.r.Peek(1); errTimeout(err) == nil {
		c.t.Fatalf("unexpected reply %q (%v)", b, err)
	}
}

// errTimeout returns err if it is a read timeout, else nil.
func errTimeout(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return nil
}

// TestLoopSetAnsweredWhenDurable: a whole set is started by the loop,
// answered only once the backend reports it durable, and what was
// pipelined after it (before and while it commits) is served after it;
// the connection then waits in its loop again.
func TestLoopSetAnsweredWhenDurable(t *testing.T) {
	skipUnlessLoops(t)
	b := newStartingBackend()
	b.hold = true
	ts := startServer(t, Config{EventLoops: 1}, b)
	sets := counterValue(loopSetsTotal)
	committing := gaugeValue(t, loopCommitting)

	c := dialParked(t, ts, 1)
	c.send("set k 7 0 5\r\nhello\r\nget k\r\n")
	waitFor(t, "the set to be started", func() bool { return b.held() == 1 })
	if got := gaugeValue(t, loopCommitting); got != committing+1 {
		t.Fatalf("committing connections %v, want %v", got, committing+1)
	}
	c.expectNothing()
	c.send("gets k\r\n") // arrives while the set commits
	c.expectNothing()
	if _, ok := b.value("k"); ok {
		t.Fatal("stored before the set completed")
	}
	b.release(nil)
	c.expect("STORED\r\nVALUE k 7 5\r\nhello\r\nEND\r\nVALUE k 7 5 1\r\nhello\r\nEND\r\n")
	waitParked(t, ts, 1)
	if got := counterValue(loopSetsTotal); got != sets+1 {
		t.Fatalf("loop sets %v, want %v", got, sets+1)
	}
	if got := gaugeValue(t, loopCommitting); got != committing {
		t.Fatalf("committing connections %v after the reply, want %v", got, committing)
	}

	// Sets back to back, and noreply: the second is answered only by the
	// get after it.
	b.mu.Lock()
	b.hold = false
	b.mu.Unlock()
	c.send("set a 0 0 1\r\n1\r\nset b 0 0 2 noreply\r\n22\r\nget a b\r\n")
	c.expect("STORED\r\nVALUE a 0 1\r\n1\r\nVALUE b 0 2\r\n22\r\nEND\r\n")
	waitParked(t, ts, 1)
}

// TestLoopSetFails: a set whose commit fails (a full disk, a failed
// write) is answered with the error, counted, and changes nothing; the
// connection goes on serving.
func TestLoopSetFails(t *testing.T) {
	skipUnlessLoops(t)
	for _, err := range []error{
		fmt.Errorf("%w: below the reserve", store.ErrDiskFull),
		fmt.Errorf("%w: segment write: input/output error", store.ErrWriteFailed),
	} {
		b := newStartingBackend()
		b.put("k", "old")
		b.hold = true
		ts := startServer(t, Config{EventLoops: 1}, b)
		kind, line := backendFailure(err)
		before := counterValue(errorsByKind[kind])
		c := dialParked(t, ts, 1)
		c.send("set k 0 0 3\r\nnew\r\nget k\r\n")
		waitFor(t, "the set to be started", func() bool { return b.held() == 1 })
		b.release(err)
		c.expect(line + "\r\nVALUE k 0 3\r\nold\r\nEND\r\n")
		if got := counterValue(errorsByKind[kind]); got != before+1 {
			t.Errorf("%v: %s errors %v, want %v", err, kind, got, before+1)
		}
		waitParked(t, ts, 1)
	}
}

// TestLoopSetRefusedOrBusy: a set the backend refuses at once is answered
// with the refusal without waiting; one it cannot start now is served by
// Set on a goroutine. Neither loses the requests after it.
func TestLoopSetRefusedOrBusy(t *testing.T) {
	skipUnlessLoops(t)
	b := newStartingBackend()
	b.refuse = fmt.Errorf("%w: this node is a replica", store.ErrNotRoot)
	ts := startServer(t, Config{EventLoops: 1}, b)
	kind, line := backendFailure(b.refuse)
	before := counterValue(errorsByKind[kind])
	c := dialParked(t, ts, 1)
	c.send("set k 0 0 1\r\nv\r\nget k\r\n")
	c.expect(line + "\r\nEND\r\n")
	if got := counterValue(errorsByKind[kind]); got != before+1 {
		t.Errorf("not-root errors %v, want %v", got, before+1)
	}
	if _, ok := b.value("k"); ok {
		t.Fatal("a refused set was stored")
	}
	waitParked(t, ts, 1)

	b.mu.Lock()
	b.refuse, b.busy = nil, true
	b.mu.Unlock()
	c.send("set k 0 0 1\r\nv\r\nget k\r\n")
	c.expect("STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if started != 0 {
		t.Fatalf("%d sets started while the backend was busy", started)
	}
	waitParked(t, ts, 1)
}

// TestLoopSetClientGone: a client that closes while its set commits does
// not stop the set (it is stored), and its connection is forgotten once
// the set is answered.
func TestLoopSetClientGone(t *testing.T) {
	skipUnlessLoops(t)
	b := newStartingBackend()
	b.hold = true
	ts := startServer(t, Config{EventLoops: 1}, b)
	before := gaugeValue(t, loopConnections)
	c := dialParked(t, ts, 1)
	c.send("set k 0 0 5\r\nhello\r\nget k\r\n")
	waitFor(t, "the set to be started", func() bool { return b.held() == 1 })
	c.nc.Close()
	b.release(nil)
	waitFor(t, "the connection to go", func() bool {
		return ts.stats.currConns.Load() == 0 && gaugeValue(t, loopConnections) == before
	})
	if v, _ := b.value("k"); v != "hello" {
		t.Fatalf("k = %q, want hello", v)
	}
	d := dialParked(t, ts, 1)
	d.send("get k\r\n")
	d.expect("VALUE k 0 5\r\nhello\r\nEND\r\n")
}

// TestLoopSetShutdown: Shutdown waits for a set being committed and
// answers it; a forced shutdown gives up waiting for one that does not
// complete, and its late completion is ignored.
func TestLoopSetShutdown(t *testing.T) {
	skipUnlessLoops(t)
	b := newStartingBackend()
	b.hold = true
	ts := startServer(t, Config{EventLoops: 1}, b)
	c := dialParked(t, ts, 1)
	c.send("set k 0 0 1\r\nv\r\n")
	waitFor(t, "the set to be started", func() bool { return b.held() == 1 })
	done := make(chan error, 1)
	go func() { done <- ts.Shutdown(context.Background()) }()
	c.expectNothing()
	b.release(nil)
	c.expect("STORED\r\n")
	c.expectClosed(30 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	b2 := newStartingBackend()
	b2.hold = true
	ts2 := startServer(t, Config{EventLoops: 1}, b2)
	c2 := dialParked(t, ts2, 1)
	c2.send("set k 0 0 1\r\nv\r\n")
	waitFor(t, "the set to be started", func() bool { return b2.held() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts2.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("forced Shutdown: %v", err)
	}
	b2.release(nil) // after the loop ended: ignored
	if v, _ := b2.value("k"); v != "v" {
		t.Fatalf("k = %q: the set given up must still complete in the backend", v)
	}
}

// TestLoopSetsAnswerLikePoller: streams with sets among other requests get
// the same replies from a loop that starts sets as from the poller.
func TestLoopSetsAnswerLikePoller(t *testing.T) {
	skipUnlessLoops(t)
	streams := []string{
		"set a 0 0 1\r\nx\r\nget a\r\n",
		"set a 5 0 3 noreply\r\nxyz\r\ngets a\r\nset b 0 0 0\r\n\r\nget b\r\n",
		"set a 0 0 1\r\nxx\r\nget a\r\n",    // bad data chunk
		"set a 0 0 abc\r\nx\r\nget a\r\n",   // bad length
		"set a 0 0 2\r\nx\r\n\r\nget a\r\n", // "x\r", then no terminator
		"set a 0 0 1\r\n1\r\nadd a 0 0 1\r\n2\r\nget a\r\n",
		"set " + strings.Repeat("k", 251) + " 0 0 1\r\nv\r\nget a\r\n",
	}
	serve := func(cfg Config, b Backend, in string, trickle bool) string {
		ts := startServer(t, cfg, b)
		c := dial(t, "tcp", ts.addr)
		if cfg.EventLoops > 0 {
			waitParked(t, ts, 1)
		}
		chunks := []string{in}
		if trickle {
			chunks = chunks[:0]
			for i := range len(in) {
				chunks = append(chunks, in[i:i+1])
			}
		}
		for _, s := range append(chunks, "version\r\n") {
			c.send(s)
		}
		c.nc.(*net.TCPConn).CloseWrite()
		out, err := io.ReadAll(c.r)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("%q: reading the replies: %v", in, err)
		}
		return string(out)
	}
	for _, in := range streams {
		want := serve(Config{EventLoops: -1, Threads: -1}, newFakeBackend(), in, false)
		for _, trickle := range []bool{false, true} {
			if got := serve(Config{EventLoops: 1}, newStartingBackend(), in, trickle); got != want {
				t.Errorf("%q (a byte at a time: %v):\nloops  %q\npoller %q", in, trickle, got, want)
			}
		}
	}
}
