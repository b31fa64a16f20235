package proxy

import (
	"context"
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// In-process clusters for the proxy tests: real stores, replication
// servers and replicas on 127.0.0.1, with links that delay, stall or cut
// TCP traffic between them.

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
			if (strings.Contains(g, "internal/proxy.") || strings.Contains(g, "internal/repl.")) && !strings.Contains(g, "leakedGoroutines") {
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

func testLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("QS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return quiet
}

var dbSeq atomic.Int64

// node is one in-process server of a database.
type node struct {
	st   *store.Store
	addr string // replication listener
	pid  repl.ProcessID
	rep  *repl.Replica
	pool *Pool
	// relay: the node answers fetches of its proxy database (a relay).
	relay bool
}

type cluster struct {
	t    *testing.T
	name string
	ctx  context.Context
	wg   sync.WaitGroup
	// metrics are those of the cluster's pools, L2 tiers and warmers.
	metrics *Metrics
	// readCacheBytes, if set, is the read cache of the stores opened next.
	readCacheBytes int64
	// stores are those the cluster opened (its nodes').
	mu     sync.Mutex
	stores []*store.Store
	// replMetrics counts for the replication servers and replicas of
	// the cluster's nodes, shared as those of one process share one.
	replMetrics *repl.Metrics
}

func newCluster(t *testing.T) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{t: t, name: fmt.Sprintf("%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), dbSeq.Add(1)), ctx: ctx,
		replMetrics: repl.NewMetrics()}
	t.Cleanup(func() { cancel(); c.wg.Wait() })
	c.metrics = NewMetrics()
	return c
}

func (c *cluster) open(o store.Options) *store.Store {
	c.t.Helper()
	o.Name, o.Dir, o.MinFreeBytes, o.BallastBytes, o.Logger = c.name, c.t.TempDir(), 1, -1, quiet
	o.ReadCacheBytes = c.readCacheBytes
	st, err := store.Open(o)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { st.Close() })
	c.mu.Lock()
	c.stores = append(c.stores, st)
	c.mu.Unlock()
	return st
}

// storeSum adds up f of the metrics of every store of the cluster.
func (c *cluster) storeSum(f func(store.Metrics) float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum float64
	for _, st := range c.stores {
		sum += f(st.Metrics())
	}
	return sum
}

// serve starts a replication server for st.
func (c *cluster) serve(n *node) {
	c.t.Helper()
	srv, err := repl.NewServer(repl.ServerConfig{ProcessID: n.pid, ProgressInterval: 50 * time.Millisecond,
		Relay: func(string) bool { return n.relay }, Metrics: c.replMetrics}, func(db string) (*store.Store, bool) {
		return n.st, db == n.st.Name()
	}, quiet)
	if err != nil {
		c.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	go srv.Serve(ln)
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
}

func (c *cluster) root() *node {
	n := &node{st: c.open(store.Options{ChunkBytes: 4096}), pid: repl.NewProcessID()}
	c.serve(n)
	return n
}

// follow makes n replicate from sources.
func (c *cluster) follow(n *node, sources ...string) {
	c.t.Helper()
	r, err := repl.NewReplica(repl.ReplicaConfig{Database: c.name, Sources: sources, ProcessID: n.pid,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, IdleTimeout: 5 * time.Second, BootstrapMinEntries: -1,
		Metrics: c.replMetrics}, n.st, quiet)
	if err != nil {
		c.t.Fatal(err)
	}
	n.rep = r
	c.wg.Add(1)
	go func() { defer c.wg.Done(); r.Run(c.ctx) }()
}

func (c *cluster) replica(dbid store.DBID, sources ...string) *node {
	n := &node{st: c.open(store.Options{DBID: dbid, ChunkBytes: 4096}), pid: repl.NewProcessID()}
	c.serve(n)
	c.follow(n, sources...)
	return n
}

// proxy opens a proxy store following upstream and fetching from the
// pool's members.
func (c *cluster) proxy(dbid store.DBID, po store.ProxyOptions, pc Config, upstream ...string) *node {
	c.t.Helper()
	n := &node{st: c.open(store.Options{DBID: dbid, ChunkBytes: 4096, Proxy: &po}), pid: repl.NewProcessID()}
	pc.Database, pc.DBID, pc.ProcessID, pc.Metrics = c.name, dbid, n.pid, c.metrics
	p, err := New(pc, testLogger())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.Close)
	n.pool = p
	n.st.SetFetcher(p)
	c.follow(n, upstream...)
	return n
}

// relayProxy opens a proxy that is the relay of its data centre: it
// fetches from the pool's members and answers the fetches of other
// proxies on its replication listener.
func (c *cluster) relayProxy(dbid store.DBID, po store.ProxyOptions, pc Config, upstream ...string) *node {
	c.t.Helper()
	n := c.proxy(dbid, po, pc, upstream...)
	n.relay = true
	c.serve(n)
	return n
}

func waitApplied(t *testing.T, st *store.Store, index uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := st.WaitApplied(ctx, index); err != nil {
		t.Fatalf("%s did not reach %d: %v", st.Name(), index, err)
	}
}

// link forwards TCP connections to a target, delaying every chunk by a
// settable time (a slow path), carrying at most rate bytes a second each
// way of each connection (a thin pipe), stalling all traffic while
// stalled, and cutting every connection on demand (a server dying
// mid-request).
type link struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // ns
	rate   atomic.Int64 // bytes per second; 0: unlimited
	stall  atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLink(t *testing.T, target string, delay time.Duration) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	l.delay.Store(int64(delay))
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(l.close)
	return l
}

func (l *link) Addr() string { return l.ln.Addr().String() }

func (l *link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns[c], l.conns[up] = struct{}{}, struct{}{}
		l.mu.Unlock()
		l.wg.Add(2)
		go func() { defer l.wg.Done(); l.pipe(up, c); l.drop(c, up) }()
		go func() { defer l.wg.Done(); l.pipe(c, up); l.drop(c, up) }()
	}
}

func (l *link) drop(a, b net.Conn) {
	a.Close()
	b.Close()
	l.mu.Lock()
	delete(l.conns, a)
	delete(l.conns, b)
	l.mu.Unlock()
}

// pipe copies src to dst; each chunk leaves delay after it arrived.
func (l *link) pipe(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			for l.stall.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			if d := time.Until(ch.at.Add(time.Duration(l.delay.Load()))); d > 0 {
				time.Sleep(d)
			}
			if r := l.rate.Load(); r > 0 {
				time.Sleep(time.Duration(int64(len(ch.b)) * int64(time.Second) / r))
			}
			if _, err := dst.Write(ch.b); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{buf[:n], time.Now()}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// cut closes every connection through the link.
func (l *link) cut() {
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
}

func (l *link) close() {
	l.ln.Close()
	l.stall.Store(false)
	l.cut()
	l.wg.Wait()
}

// metricValue sums the series of a registered metric whose labels include
// want, read from the process registry.
func metricValue(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	return gatheredValue(t, metrics.Registry, name, want)
}

// replValue sums the series of a replication metric of the cluster.
func (c *cluster) replValue(name string) float64 {
	c.t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.replMetrics)
	return gatheredValue(c.t, reg, name, nil)
}

// gatheredValue sums the series of metric name of g whose labels include
// want.
func gatheredValue(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
