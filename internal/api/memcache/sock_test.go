package memcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestThreadLimit: Config.Threads connections get a dedicated thread, the
// next ones go through the poller, and closed ones give their thread back.
func TestThreadLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dedicated threads are Linux only")
	}
	ts := startServer(t, Config{Threads: 1, EventLoops: -1}, newFakeBackend())
	c1, c2 := dial(t, "tcp", ts.addr), dial(t, "tcp", ts.addr)
	for _, c := range []*client{c1, c2} {
		c.send("set k 0 0 1\r\nv\r\nget k\r\n")
		c.expect("STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n")
	}
	dedicated := 0
	ts.mu.Lock()
	for c := range ts.mu.conns {
		if c.sock.dedicated() {
			dedicated++
		}
	}
	ts.mu.Unlock()
	if dedicated != 1 {
		t.Errorf("%d connections on a dedicated thread, want 1 (Threads: 1)", dedicated)
	}
	if g := gaugeValue(t, ts.m.threadConnections); g != 1 {
		t.Errorf("thread_connections %v, want 1", g)
	}
	c1.send("quit\r\n")
	c1.expectClosed()
	waitFor(t, "the dedicated thread to be given back", func() bool {
		return gaugeValue(t, ts.m.threadConnections) == 0
	})
	c3 := dial(t, "tcp", ts.addr) // takes the free thread
	c3.send("version\r\n")
	c3.expect(versionReply)
	if g := gaugeValue(t, ts.m.threadConnections); g != 1 {
		t.Errorf("after a reconnect thread_connections %v, want 1", g)
	}
}

// TestShutdownAbortsBlockedCalls: a forced Shutdown ends connections
// blocked in a read (a request that never completes) and in a write (a
// client that does not read its replies), in both I/O modes.
func TestShutdownAbortsBlockedCalls(t *testing.T) {
	forIOModes(t, func(t *testing.T, threads int) {
		b := newFakeBackend()
		b.put("big", strings.Repeat("z", 1<<20))
		ts := startServer(t, withThreads(Config{RequestTimeout: time.Minute, WriteTimeout: time.Minute}, threads), b)
		reader := dial(t, "tcp", ts.addr)
		reader.send("set k 0 0 10\r\n01234") // blocks in the data block's read
		writer := dial(t, "tcp", ts.addr)
		go func() {
			for range 100 {
				if _, err := writer.nc.Write([]byte("get big\r\n")); err != nil {
					return
				}
			}
		}()
		waitFor(t, "both connections", func() bool { return ts.stats.currConns.Load() == 2 })
		time.Sleep(200 * time.Millisecond) // the writer's replies fill the socket buffers
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want DeadlineExceeded (two connections were busy)", err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("forced Shutdown took %v", d)
		}
		if n := ts.stats.currConns.Load(); n != 0 {
			t.Errorf("%d connections left after Shutdown", n)
		}
	})
}

// TestReadNice: a dedicated thread asks for readSlice, and runs gets at
// Config.ReadNice and anything else at the nice value it started with.
func TestReadNice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dedicated threads are Linux only")
	}
	s := New(Config{ReadNice: -5}, newFakeBackend(), nil)
	type result struct {
		base, get, set, bad, getAgain int
		refused                       bool
		slice                         time.Duration
	}
	done := make(chan result)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and with
		// it the nice values this test gave it.
		runtime.LockOSThread()
		c := newConn(s, nil, &testDedicated{})
		c.takeThread()
		var r result
		r.slice = threadSlice()
		r.base = c.baseNice
		c.prioritize(cmdGets, true)
		r.get = threadNice()
		c.prioritize(cmdSet, true)
		r.set = threadNice()
		c.prioritize(cmdGet, true)
		r.getAgain = threadNice()
		c.prioritize(cmdGet, false) // refused by the parser: not served as a read
		r.bad = threadNice()
		r.refused = s.niceRefused.Load()
		done <- r
	}()
	r := <-done
	if kernelKeepsSlices() && r.slice != readSlice {
		t.Errorf("dedicated thread's slice %v, want %v", r.slice, readSlice)
	}
	if r.slice == readSlice && gaugeValue(t, s.m.readSliceSeconds) != readSlice.Seconds() {
		t.Errorf("thread_slice_seconds %v, want %v", gaugeValue(t, s.m.readSliceSeconds), readSlice.Seconds())
	}
	if r.refused {
		if r.get != r.base {
			t.Errorf("nice refused, yet a get ran at %d (base %d)", r.get, r.base)
		}
		t.Skip("raising a thread's priority is not permitted here (needs CAP_SYS_NICE)")
	}
	want := min(r.base, -5)
	if r.get != want || r.getAgain != want {
		t.Errorf("gets ran at nice %d and %d, want %d", r.get, r.getAgain, want)
	}
	if r.set != r.base || r.bad != r.base {
		t.Errorf("a set ran at nice %d and a refused line at %d, want the base %d", r.set, r.bad, r.base)
	}
	if g := gaugeValue(t, s.m.readNice); g != -5 {
		t.Errorf("read_nice gauge %v, want -5", g)
	}
}

// testDedicated stands for a dedicated thread's socket in tests that call
// conn methods directly.
type testDedicated struct{ pollSock }

func (*testDedicated) dedicated() bool { return true }

// kernelKeepsSlices reports whether the kernel keeps (and reports) a
// thread's requested slice: Linux 6.12 and later.
func kernelKeepsSlices() bool {
	got := make(chan time.Duration)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		if setThreadSlice(2*readSlice) != nil {
			got <- 0
			return
		}
		got <- threadSlice()
	}()
	return <-got == 2*readSlice
}

// TestIdleThreadsDoNotStallOthers: many connections whose threads are
// blocked in read(2) (more than GOMAXPROCS) hold no scheduler slot the
// others need: a busy connection and the server's other goroutines keep
// being served promptly.
func TestIdleThreadsDoNotStallOthers(t *testing.T) {
	ts := startServer(t, Config{EventLoops: -1}, newFakeBackend())
	idle := make([]*client, 4*runtime.GOMAXPROCS(0)+8)
	for i := range idle {
		idle[i] = dial(t, "tcp", ts.addr)
		idle[i].send("version\r\n")
		idle[i].expect(versionReply)
	}
	time.Sleep(50 * time.Millisecond) // every idle thread is back in read(2)
	busy := dial(t, "tcp", ts.addr)
	var worst time.Duration
	start := time.Now()
	for i := range 300 {
		t0 := time.Now()
		busy.send(fmt.Sprintf("set k%d 0 0 1\r\nv\r\nget k%d\r\n", i, i))
		busy.expect(fmt.Sprintf("STORED\r\nVALUE k%d 0 1\r\nv\r\nEND\r\n", i))
		worst = max(worst, time.Since(t0))
	}
	t.Logf("%d idle threads: 300 round trips in %v, slowest %v", len(idle), time.Since(start), worst)
	if worst > 20*time.Second {
		t.Errorf("a round trip took %v with %d idle threads blocked in read", worst, len(idle))
	}
	// The idle ones still answer.
	for _, c := range idle {
		c.send("version\r\n")
		c.expect(versionReply)
	}
}

// TestGetRoundTripDoesNotAllocate: a get served over a real socket, on a
// dedicated thread or through the poller, allocates nothing per request
// (client side included: it reuses its buffers).
func TestGetRoundTripDoesNotAllocate(t *testing.T) {
	forIOModes(t, func(t *testing.T, threads int) {
		b := newFakeBackend()
		b.put("k", "value")
		ts := startServer(t, withThreads(Config{}, threads), b)
		c := dial(t, "tcp", ts.addr)
		req := []byte("get k\r\n")
		want := "VALUE k 0 5\r\nvalue\r\nEND\r\n"
		got := make([]byte, len(want))
		roundTrip := func() {
			if _, err := c.nc.Write(req); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c.nc, got); err != nil {
				t.Fatal(err)
			}
		}
		roundTrip()
		if string(got) != want {
			t.Fatalf("reply %q", got)
		}
		if n := testing.AllocsPerRun(500, roundTrip); n >= 1 {
			t.Errorf("%.1f allocations per get round trip", n)
		}
	})
}

// TestPollSockWakeBeforeRead: a wake (Shutdown) that lands between a
// connection going idle and its read setting its deadline is not lost:
// the read returns at once instead of waiting out the idle timeout. So is
// an abort before a write.
func TestPollSockWakeBeforeRead(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	p := &pollSock{nc: a}
	p.wake()
	done := make(chan error, 1)
	go func() {
		_, err := p.read(make([]byte, 8), time.Now().Add(time.Hour))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after wake: %v", err)
		}
	case <-time.After(60 * time.Second):
		a.Close()
		t.Fatal("a read that began after wake waited for its own deadline")
	}
	p.abort()
	if _, err := p.write([]byte("x"), time.Now().Add(time.Hour)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write after abort: %v", err)
	}
}
