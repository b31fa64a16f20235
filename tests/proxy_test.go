package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"
	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/checker"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// proxyTree starts a root, a full replica and a proxy (qs serve --role
// proxy) that keeps almost nothing: a one-byte budget and a 5-entry window.
func proxyTree(t *testing.T) (root, replica, px *proc) {
	root = startQS(t, t.TempDir())
	replica = startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	px = startQS(t, t.TempDir(), "--upstream", root.Addr["repl"], "--role", "proxy", "--replicas", replica.Addr["repl"],
		"--cache-bytes", "1", "--window", "5")
	return root, replica, px
}

// TestProxyServesLikeAReplica: every read API of a proxy answers what a
// replica would — gets, multi-gets, scans, memcached gets, min_index
// waits — fetching what it does not keep; absent keys cost no fetch;
// writes are refused; status and metrics show the cache.
func TestProxyServesLikeAReplica(t *testing.T) {
	root, _, px := proxyTree(t)
	ctx := context.Background()
	rc, pc := root.client(t), px.client(t)
	want := map[string]string{}
	var last uint64
	for i := 0; i < 60; i++ {
		k := fmt.Sprintf("app/k%02d", i)
		v := strings.Repeat(fmt.Sprint(i), 50+i*40)
		r, err := rc.Put(ctx, k, []byte(v), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[k], last = v, r.Index
	}
	for k, v := range want {
		got, err := pc.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Value) != v || got.AppliedIndex < last {
			t.Fatalf("%s: %d bytes at %d", k, len(got.Value), got.AppliedIndex)
		}
	}
	misses, _ := scrapeMetric(px.Addr["http"], `qs_store_proxy_lookups_total{db="default",result="miss"}`)
	if misses < 40 {
		t.Fatalf("%v misses: the proxy kept values it should not", misses)
	}
	// Negative lookups: answered locally, no fetch.
	fetches, _ := scrapeMetric(px.Addr["http"], `qs_proxy_fetches_total{db="default",result="ok"}`)
	for i := 0; i < 100; i++ {
		if _, err := pc.Get(ctx, fmt.Sprintf("app/absent%d", i), client.ReadOptions{}); !client.IsNotFound(err) {
			t.Fatalf("absent key: %v", err)
		}
	}
	neg, _ := scrapeMetric(px.Addr["http"], `qs_store_proxy_lookups_total{db="default",result="negative"}`)
	after, _ := scrapeMetric(px.Addr["http"], `qs_proxy_fetches_total{db="default",result="ok"}`)
	if neg < 100 || after != fetches {
		t.Fatalf("negative lookups %v, fetches %v → %v", neg, fetches, after)
	}
	// mget and scan at one index.
	m, err := pc.MGet(ctx, []string{"app/k01", "app/k59", "app/nope"}, client.ReadOptions{})
	if err != nil || len(m.Values) != 2 || string(m.Values["app/k59"]) != want["app/k59"] || m.Index < last {
		t.Fatalf("mget: %v %+v", err, m)
	}
	s, err := pc.Scan(ctx, "app/", "", 1000, client.ReadOptions{})
	if err != nil || len(s.Items) != 60 {
		t.Fatalf("scan: %v, %d items", err, len(s.Items))
	}
	for _, it := range s.Items {
		if string(it.Value) != want[it.Key] {
			t.Fatalf("scan %s differs", it.Key)
		}
	}
	// memcached.
	mc := gomemcache.New(px.Addr["memcache"])
	it, err := mc.Get("app/k07")
	if err != nil || string(it.Value) != want["app/k07"] {
		t.Fatalf("memcached get: %v", err)
	}
	if _, err := mc.Get("app/none"); !errors.Is(err, gomemcache.ErrCacheMiss) {
		t.Fatalf("memcached miss: %v", err)
	}
	// A watch on the proxy, then a write: the watcher sees it, and so does
	// a read that waits for its index (read-your-writes with min_index).
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	req, _ := http.NewRequestWithContext(wctx, "GET", "http://"+px.Addr["http"]+"/v1/default/watch?prefix=app/k00", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch on a proxy: %v %v", err, resp)
	}
	defer resp.Body.Close()
	r, err := rc.Put(ctx, "app/k00", []byte("new"), nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		var e struct {
			Index    uint64 `json:"index"`
			Value    []byte `json:"value"`
			Progress bool   `json:"progress"`
		}
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("bad watch line %q: %v", lines.Text(), err)
		}
		if !e.Progress {
			if e.Index != r.Index || string(e.Value) != "new" {
				t.Fatalf("watch event %+v, want the write at %d", e, r.Index)
			}
			break
		}
	}
	wcancel()
	if got, err := pc.Get(ctx, "app/k00", client.ReadOptions{MinIndex: r.Index, Wait: 10 * time.Second}); err != nil || string(got.Value) != "new" {
		t.Fatalf("read your write: %v %q", err, got.Value)
	}
	// Writes are refused.
	if _, err := pc.Put(ctx, "app/x", []byte("y"), nil); err == nil || !strings.Contains(err.Error(), "not_root") {
		t.Fatalf("write to a proxy: %v", err)
	}
	st, err := pc.Status(ctx)
	if err != nil || st["role"] != "proxy" {
		t.Fatalf("status %v %v", err, st)
	}
	pst, ok := st["proxy"].(map[string]any)
	if !ok || pst["window_entries"] != float64(5) || len(pst["replicas"].([]any)) != 2 {
		t.Fatalf("proxy status %v", st["proxy"])
	}
	if rst, _ := rc.Status(ctx); rst["history"] == nil {
		t.Fatalf("root status lacks history: %v", rst)
	}
}

// TestProxyConsistencyOverHTTP runs the consistency check through real
// processes and the HTTP API: writers change a keyspace of 200 keys at the root,
// readers read single keys and groups through a proxy that keeps almost
// nothing, and every answer is checked against the state at its
// Qs-Applied-Index, rebuilt from the writes the root acknowledged (the
// only other entries are heartbeats, which change nothing).
func TestProxyConsistencyOverHTTP(t *testing.T) {
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	slow := newFaultProxy(t, root.Addr["repl"]) // a second replica that stalls now and then
	replica2 := startQS(t, t.TempDir(), "--upstream", slow.Addr())
	px := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"], "--role", "proxy",
		"--replicas", replica2.Addr["repl"]+","+replica.Addr["repl"], "--cache-bytes", "1", "--window", "20")
	ctx := context.Background()
	rc := root.client(t)
	type write struct {
		index uint64
		ops   []wal.Op
	}
	var mu sync.Mutex
	var writes []write
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var ops []client.Op
				var wops []wal.Op
				for j := rng.IntN(3) + 1; j > 0; j-- {
					k := fmt.Sprintf("k%03d", rng.IntN(200))
					if rng.IntN(3) == 0 {
						ops = append(ops, client.Op{Delete: true, Key: k})
						wops = append(wops, wal.Op{Type: wal.OpDelete, Key: []byte(k)})
						continue
					}
					v := []byte(fmt.Sprintf("%s/%d/%d", k, w, n))
					ops = append(ops, client.Op{Key: k, Value: v})
					wops = append(wops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: v})
				}
				r, err := rc.Batch(ctx, ops, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Changed {
					mu.Lock()
					writes = append(writes, write{r.Index, wops})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				slow.setStalled(false)
				return
			case <-time.After(200 * time.Millisecond):
				slow.setStalled(i%3 == 0)
			}
		}
	}()
	pc := px.client(t)
	var reads []checker.Read
	var rmu sync.Mutex
	var rwg sync.WaitGroup
	// Reads run for at least 4 s and until they exercised the proxy
	// (200 reads, some misses fetched), or for two minutes: a loaded
	// machine slows the test rather than failing it.
	var enough atomic.Bool
	start := time.Now()
	go func() {
		for !enough.Load() {
			time.Sleep(50 * time.Millisecond)
			rmu.Lock()
			n := len(reads)
			rmu.Unlock()
			misses, _ := scrapeMetric(px.Addr["http"], `qs_store_proxy_lookups_total{db="default",result="miss"}`)
			elapsed := time.Since(start)
			if elapsed > 2*time.Minute || elapsed > 4*time.Second && n >= 200 && misses > 0 {
				enough.Store(true)
			}
		}
	}()
	for cl := 0; cl < 4; cl++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), 9))
			for !enough.Load() {
				var rd checker.Read
				rd.Client = cl
				if rng.IntN(2) == 0 {
					k := fmt.Sprintf("k%03d", rng.IntN(201))
					v, err := pc.Get(ctx, k, client.ReadOptions{})
					var ce *client.Error
					switch {
					case err == nil:
						rd.At, rd.Keys, rd.Found, rd.Values = v.AppliedIndex, []string{k}, []bool{true}, [][]byte{v.Value}
					case client.IsNotFound(err) && errors.As(err, &ce):
						rd.At, rd.Keys, rd.Found, rd.Values = ce.AppliedIndex, []string{k}, []bool{false}, [][]byte{nil}
					default:
						t.Errorf("get %s: %v", k, err)
						return
					}
				} else {
					keys := []string{fmt.Sprintf("k%03d", rng.IntN(201)), fmt.Sprintf("k%03d", rng.IntN(201)), fmt.Sprintf("k%03d", rng.IntN(201))}
					m, err := pc.MGet(ctx, keys, client.ReadOptions{})
					if err != nil {
						t.Errorf("mget: %v", err)
						return
					}
					rd.At = m.Index
					for _, k := range keys {
						v, ok := m.Values[k]
						rd.Keys, rd.Found, rd.Values = append(rd.Keys, k), append(rd.Found, ok), append(rd.Values, v)
					}
				}
				rmu.Lock()
				reads = append(reads, rd)
				rmu.Unlock()
			}
		}()
	}
	rwg.Wait()
	close(stop)
	wg.Wait()

	// The model: the acknowledged writes, heartbeats in between.
	sort.Slice(writes, func(i, j int) bool { return writes[i].index < writes[j].index })
	m := checker.NewModel()
	next := uint64(1)
	for _, w := range writes {
		for ; next < w.index; next++ {
			m.Apply(wal.Entry{Index: next})
		}
		if err := m.Apply(wal.Entry{Index: w.index, Ops: w.ops}); err != nil {
			t.Fatal(err)
		}
		next = w.index + 1
	}
	// Reads may be at heartbeats after the last write.
	var maxAt uint64
	for _, rd := range reads {
		maxAt = max(maxAt, rd.At)
	}
	for ; next <= maxAt; next++ {
		m.Apply(wal.Entry{Index: next})
	}
	// Per client in issue order (they were appended in order per client).
	sort.SliceStable(reads, func(i, j int) bool { return reads[i].Client < reads[j].Client })
	rep := checker.Check(m, reads)
	misses, _ := scrapeMetric(px.Addr["http"], `qs_store_proxy_lookups_total{db="default",result="miss"}`)
	t.Logf("%d reads (%d keys) over %d writes: %d violations; %v misses", rep.Reads, rep.Keys, len(writes), rep.Count, misses)
	if rep.Count != 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	if rep.Reads < 200 || misses == 0 {
		t.Fatalf("too little exercised: %d reads, %v misses", rep.Reads, misses)
	}
}

// TestProxyKill9UnderWrites: a proxy that keeps almost nothing (so it
// admits and evicts all the time) is killed with SIGKILL three times while
// the root takes writes and a reader reads through it, and restarted on the
// same data. Afterwards it serves exactly the root's data (digest of every
// key, value and write index, its missing values fetched and checked),
// never saw a gap or a broken hash chain, did not bootstrap, and its store
// verifies offline.
func TestProxyKill9UnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("three processes, three kills")
	}
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	pxArgs := []string{"--upstream", root.Addr["repl"], "--role", "proxy", "--replicas", replica.Addr["repl"],
		"--cache-bytes", "4000", "--window", "20"}
	pxDir := t.TempDir()
	px := startQS(t, pxDir, pxArgs...)
	rc := root.client(t)

	ctx, stopWriting := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked, reads := 0, 0
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(3, 5))
		// Each write runs to its answer (stopping cancels no request): a
		// write cancelled in flight could still land after the last one.
		bg := context.Background()
		for n := 0; n < 20000 && ctx.Err() == nil; n++ {
			key := fmt.Sprintf("k%03d", rng.IntN(200))
			var err error
			switch r := rng.IntN(10); {
			case r < 7:
				_, err = rc.Put(bg, key, make([]byte, 10+rng.IntN(3000)), nil)
			case r < 9:
				_, err = rc.Delete(bg, key, nil)
			default:
				_, err = rc.Batch(bg, []client.Op{
					{Key: key, Value: []byte(fmt.Sprint(n))},
					{Delete: true, Key: fmt.Sprintf("k%03d", rng.IntN(200))},
				}, nil)
			}
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					writeErr = err
					mu.Unlock()
				}
				return
			}
			mu.Lock()
			acked++
			mu.Unlock()
		}
	}()
	// The reader follows the proxy across restarts; reads fail while it is
	// down, which is expected.
	var pxAddr atomic.Value
	pxAddr.Store(px.Addr["http"])
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(9, 1))
		for n := 0; n < 200000 && ctx.Err() == nil; n++ {
			c, err := client.New([]string{pxAddr.Load().(string)}, client.Options{Timeout: 2 * time.Second})
			if err != nil {
				return
			}
			for i := 0; i < 50 && ctx.Err() == nil; i++ {
				if _, err := c.Get(ctx, fmt.Sprintf("k%03d", rng.IntN(200)), client.ReadOptions{}); err == nil || client.IsNotFound(err) {
					mu.Lock()
					reads++
					mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	}()

	// Each kill comes after some writes and reads since the last restart
	// (counted, not timed, so that a loaded machine only slows the test).
	count := func(n *int) func() int {
		return func() int {
			mu.Lock()
			defer mu.Unlock()
			if writeErr != nil {
				return 1 << 30 // reported below
			}
			return *n
		}
	}
	writes, readsDone := count(&acked), count(&reads)
	progress := func(w, r int) {
		t.Helper()
		waitCount(t, "acknowledged writes since the last restart", writes()+w, writes)
		waitCount(t, "reads through the proxy since the last restart", readsDone()+r, readsDone)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 3; round++ {
		progress(30+rng.IntN(60), 20)
		px.kill()
		px = startQS(t, pxDir, pxArgs...)
		pxAddr.Store(px.Addr["http"])
	}
	progress(30, 40) // with the rounds: at least 100 of each, checked below
	stopWriting()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("write at the root failed: %v", writeErr)
	}
	last, err := rc.Put(context.Background(), "the-end", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged writes, %d reads through the proxy, last index %d", acked, reads, last.Index)
	if acked < 100 || reads < 100 {
		t.Fatalf("only %d writes and %d reads: the kills did not happen under load", acked, reads)
	}
	ro := client.ReadOptions{MinIndex: last.Index, Wait: 30 * time.Second}
	want, err := rc.Digest(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	got, err := px.client(t).Digest(context.Background(), ro)
	if err != nil {
		t.Fatalf("proxy digest: %v\n%s", err, px.out.String())
	}
	if got.SHA256 != want.SHA256 || got.Keys != want.Keys {
		t.Fatalf("the restarted proxy serves other data: %+v, root %+v", got, want)
	}
	for _, sample := range []string{
		`qs_repl_errors_total{db="default",kind="gap"}`,
		`qs_repl_errors_total{db="default",kind="hash"}`,
		`qs_repl_errors_total{db="default",kind="apply"}`,
		`qs_repl_bootstraps_total{db="default",result="installed"}`,
		`qs_store_integrity_errors_total{db="default",kind="remote_value"}`,
	} {
		if v, err := scrapeMetric(px.Addr["http"], sample); err != nil || v != 0 {
			t.Fatalf("proxy: %s = %v (%v)", sample, v, err)
		}
	}
	// The cache was at work: the digest alone reads every key through a
	// 4,000-byte budget.
	if v, err := scrapeMetric(px.Addr["http"], `qs_store_proxy_evictions_total{db="default"}`); err != nil || v == 0 {
		t.Fatalf("no eviction since the last restart (%v): the proxy kept everything", err)
	}

	px.stop()
	if out, code := runQS(t, "verify", "--data", pxDir); code != 0 {
		t.Fatalf("verify the proxy's data: exit %d\n%s", code, out)
	}
}
