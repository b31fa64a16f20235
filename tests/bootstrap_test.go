package tests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// faultProxy forwards TCP connections to a target on loopback. It can cut
// the first connection that carries more than cutAfter bytes from the
// target (once), and can stall every connection: keep the sockets open
// and forward nothing.
type faultProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cutAfter int64 // 0: never cut
	cut      bool
	stalled  bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		limit := int64(-1)
		if p.cutAfter > 0 && !p.cut {
			limit = p.cutAfter
		}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(up, c, -1); up.Close() }()
		go func() {
			defer p.wg.Done()
			if n := p.pipe(c, up, limit); limit > 0 && n >= limit {
				p.mu.Lock()
				p.cut = true
				p.mu.Unlock()
			}
			c.Close()
			up.Close()
		}()
	}
}

// pipe copies src to dst until either fails or limit bytes (if ≥ 0)
// passed, and returns the bytes copied. While stalled it forwards nothing.
func (p *faultProxy) pipe(dst, src net.Conn, limit int64) int64 {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		want := len(buf)
		if limit >= 0 {
			if n >= limit {
				return n
			}
			want = int(min(int64(want), limit-n))
		}
		k, err := src.Read(buf[:want])
		for k > 0 && p.isStalled() {
			time.Sleep(10 * time.Millisecond)
		}
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n
			}
			n += int64(k)
		}
		if err != nil {
			return n
		}
	}
}

func (p *faultProxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

func (p *faultProxy) setStalled(s bool) {
	p.mu.Lock()
	p.stalled = s
	p.mu.Unlock()
}

func (p *faultProxy) cutOnce(after int64) {
	p.mu.Lock()
	p.cutAfter, p.cut = after, false
	p.mu.Unlock()
}

func (p *faultProxy) didCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

func (p *faultProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.stalled = false
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "qs.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fillKeys writes n keys of size random bytes through c, 100 per batch.
func fillKeys(t *testing.T, c *client.Client, prefix string, n, size int) client.WriteResult {
	t.Helper()
	var last client.WriteResult
	for i := 0; i < n; i += 100 {
		var ops []client.Op
		for j := i; j < min(i+100, n); j++ {
			v := make([]byte, size)
			for k := range v {
				v[k] = byte(rand.Uint32())
			}
			ops = append(ops, client.Op{Key: fmt.Sprintf("%s%06d", prefix, j), Value: v})
		}
		var err error
		if last, err = c.Batch(context.Background(), ops, nil); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

func readMetric(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, err := scrapeMetric(addr, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLeafOfflineBootstraps: a leaf stopped while the root's log moves past
// its position bootstraps from a snapshot when it returns, and catches up.
// The first transfer is cut halfway by a fault proxy; the next one resumes
// instead of starting over.
func TestLeafOfflineBootstraps(t *testing.T) {
	rootDir, leafDir := t.TempDir(), t.TempDir()
	root := startQS(t, rootDir, "--config", writeConfig(t, rootDir, "bootstrap_rate = -1\n[[database]]\nname = \"default\"\nretain_entries = 5\n"))
	proxy := newFaultProxy(t, root.Addr["repl"])
	leafCfg := writeConfig(t, leafDir, fmt.Sprintf("bootstrap_lock = %q\n", filepath.Join(leafDir, "bootstrap.lock")))
	leaf := startQS(t, leafDir, "--config", leafCfg, "--upstream", proxy.Addr())
	rc := root.client(t)
	ctx := context.Background()
	w, err := rc.Put(ctx, "before", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.client(t).Get(ctx, "before", client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	leaf.stop()

	// Far more than the root retains, and a few MB of snapshot.
	last := fillKeys(t, rc, "k", 4000, 1000)
	proxy.cutOnce(1 << 20)
	leaf = startQS(t, leafDir, "--config", leafCfg, "--upstream", proxy.Addr())
	lc := leaf.client(t)
	if _, err := lc.Get(ctx, "k003999", client.ReadOptions{MinIndex: last.Index, Wait: 60 * time.Second}); err != nil {
		t.Fatalf("leaf did not catch up: %v\n%s", err, leaf.out.String())
	}
	assertSameContent(t, rc, lc, last.Index)
	if !proxy.didCut() {
		t.Fatal("the proxy never cut the transfer")
	}
	st, err := lc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := st["bootstrap"].(map[string]any)
	if !ok || b["finished"] == nil || b["resumed_bytes"].(float64) < 512<<10 || b["bytes_done"] != b["bytes_total"] {
		t.Fatalf("leaf status after a resumed bootstrap: %v", st)
	}
	if n := readMetric(t, leaf.Addr["http"], `qs_repl_bootstraps_total{db="default",result="interrupted"}`); n != 1 {
		t.Fatalf("%v interrupted bootstraps, want 1", n)
	}
	if n := readMetric(t, leaf.Addr["http"], `qs_repl_bootstraps_total{db="default",result="installed"}`); n != 1 {
		t.Fatalf("%v installed bootstraps, want 1", n)
	}
	// Streaming continues, and a restart needs no new bootstrap.
	w, _ = rc.Put(ctx, "after", []byte("2"), nil)
	if _, err := lc.Get(ctx, "after", client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	leaf.stop()
	if out, code := runQS(t, "verify", "--data", leafDir); code != 0 {
		t.Fatalf("verify after bootstrap: %s", out)
	}
	leaf = startQS(t, leafDir, "--config", leafCfg, "--upstream", proxy.Addr())
	w, _ = rc.Put(ctx, "after-restart", []byte("3"), nil)
	if _, err := leaf.client(t).Get(ctx, "after-restart", client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if st, _ := leaf.client(t).Status(ctx); st["bootstrap"] != nil {
		t.Fatalf("bootstrapped again after a restart: %v", st["bootstrap"])
	}
	leaf.stop()
	root.stop()
}

// TestRootDownForAWhile: with the root gone, replicas keep serving reads
// and report a growing lag; when it returns they continue from where they
// were, without bootstrapping.
func TestRootDownForAWhile(t *testing.T) {
	rootDir := t.TempDir()
	root := startQS(t, rootDir, "--repl", "127.0.0.1:0")
	replAddr := root.Addr["repl"]
	mid := startQS(t, t.TempDir(), "--upstream", replAddr)
	leaf := startQS(t, t.TempDir(), "--upstream", mid.Addr["repl"])
	rc, lc := root.client(t), leaf.client(t)
	ctx := context.Background()
	w := fillKeys(t, rc, "r", 300, 100)
	if _, err := lc.Get(ctx, "r000299", client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	root.stop()
	lagAt := func() float64 {
		st, err := lc.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st["lag_seconds"].(float64)
	}
	l1 := lagAt()
	time.Sleep(2500 * time.Millisecond)
	l2 := lagAt()
	if l2 < l1+2 {
		t.Fatalf("lag did not grow with the root down: %.2f then %.2f", l1, l2)
	}
	if v, err := lc.Get(ctx, "r000123", client.ReadOptions{}); err != nil || len(v.Value) != 100 {
		t.Fatalf("leaf read with the root down: %v", err)
	}
	// The root returns on the same data and address.
	root = startQS(t, rootDir, "--repl", replAddr)
	w, err := root.client(t).Put(ctx, "back", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Get(ctx, "back", client.ReadOptions{MinIndex: w.Index, Wait: 45 * time.Second}); err != nil {
		t.Fatalf("leaf after the root returned: %v", err)
	}
	if l := lagAt(); l > 2 {
		t.Fatalf("lag %.2f s after the root returned", l)
	}
	for _, p := range []*proc{mid, leaf} {
		if n := readMetric(t, p.Addr["http"], `qs_repl_bootstraps_total{db="default",result="installed"}`); n != 0 {
			t.Fatalf("a replica bootstrapped after the root returned (%v)", n)
		}
		if st, _ := p.client(t).Status(ctx); st["bootstrap"] != nil {
			t.Fatalf("bootstrap status %v", st["bootstrap"])
		}
	}
	leaf.stop()
	mid.stop()
	root.stop()
}

// scrapeMetric reads one sample, written exactly as exposed (name with
// its labels in order), from a server's /metrics; absent means 0.
func scrapeMetric(addr, sample string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, nil
}
