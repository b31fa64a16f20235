package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func value(k string, gen int) []byte { return []byte(fmt.Sprintf("%s=%d:%0100d", k, gen, gen)) }

// fill writes n keys to root, one entry each.
func fill(t *testing.T, root *store.Store, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k%03d", i)
		if _, err := root.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(k), Value: value(k, 0)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// readKeys reads random keys through the proxy and checks the values;
// it returns the errors seen.
func readKeys(t *testing.T, px *store.Store, n, keys int) int {
	t.Helper()
	errs := 0
	for i := 0; i < n; i++ {
		if !readKey(t, px, fmt.Sprintf("k%03d", rand.IntN(keys))) {
			errs++
		}
	}
	return errs
}

// readKey reads filled key k through the proxy and checks its value; it
// reports whether the read succeeded (a failure is logged).
func readKey(t *testing.T, px *store.Store, k string) bool {
	t.Helper()
	_, err := px.Lookup([][]byte{[]byte(k)}, func(_ uint64, _ int, v []byte, _ uint64, found bool) error {
		if !found || string(v) != string(value(k, 0)) {
			t.Errorf("%s: found=%v %q", k, found, v)
		}
		return nil
	})
	if err != nil {
		t.Logf("read %s: %v", k, err)
		return false
	}
	return true
}

// coldProxy builds root → replicas and a proxy that keeps no values
// beyond a one-entry window, with no read cache: nearly every read of the
// filled keys is a remote fetch.
func coldProxy(t *testing.T, c *cluster, nkeys int, members func(root, r1, r2 *node) []string) (*node, *node) {
	root := c.root()
	fill(t, root.st, nkeys)
	r1 := c.replica(root.st.DBID(), root.addr)
	r2 := c.replica(root.st.DBID(), root.addr)
	waitApplied(t, r1.st, root.st.AppliedIndex())
	waitApplied(t, r2.st, root.st.AppliedIndex())
	po := store.ProxyOptions{Window: 1, CacheBytes: -1, EvictInterval: time.Millisecond}
	px := c.proxy(root.st.DBID(), po, Config{Replicas: members(root, r1, r2), SidelineMin: 50 * time.Millisecond, SidelineMax: 200 * time.Millisecond}, root.addr)
	waitApplied(t, px.st, root.st.AppliedIndex())
	// The keeper evicts what the proxy applied in the background: until
	// it has, reads are answered locally, not fetched.
	waitFor(t, "the proxy's eviction down to its window", func() bool { return px.st.ProxyStats().CachedValues <= 1 })
	return root, px
}

// TestPoolSpreadsAndVerifies: misses are fetched, verified and spread over
// the replicas.
func TestPoolSpreadsAndVerifies(t *testing.T) {
	c := newCluster(t)
	var addrs []string
	_, px := coldProxy(t, c, 200, func(root, r1, r2 *node) []string {
		addrs = []string{r1.addr, r2.addr}
		return addrs
	})
	if errs := readKeys(t, px.st, 300, 200); errs != 0 {
		t.Fatalf("%d reads failed", errs)
	}
	for _, a := range addrs {
		if n := counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, a, "ok")); n < 10 {
			t.Errorf("replica %s answered %v requests: not spread", a, n)
		}
	}
	if counter(t, c.metrics.fetches.WithLabelValues(c.name, "ok")) == 0 {
		t.Fatal("no fetch counted")
	}
}

// TestPoolSurvivesDeadAndDyingReplicas: one member does not exist, the
// connections to another are cut again and again mid-request; every read
// still succeeds, costing only latency, and the dead member is sidelined.
func TestPoolSurvivesDeadAndDyingReplicas(t *testing.T) {
	c := newCluster(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	var flaky *link
	_, px := coldProxy(t, c, 200, func(root, r1, r2 *node) []string {
		flaky = newLink(t, r1.addr, 2*time.Millisecond)
		return []string{dead, flaky.Addr(), r2.addr}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				flaky.cut()
			}
		}
	}()
	errs := readKeys(t, px.st, 500, 200)
	close(stop)
	wg.Wait()
	if errs != 0 {
		t.Fatalf("%d reads failed", errs)
	}
	if counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, dead, "error")) == 0 {
		t.Fatal("dead member never counted as failing")
	}
	if counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, flaky.Addr(), "error")) == 0 {
		t.Fatal("cut connections never failed a request: the test did not exercise retries")
	}
	if counter(t, c.metrics.fetches.WithLabelValues(c.name, "retried")) == 0 {
		t.Fatal("no retry counted")
	}
	st := px.pool.Status()
	if len(st) != 3 || st[0].Addr != dead || st[0].Failures == 0 {
		t.Fatalf("status %+v", st)
	}
}

// liar is a fetch server that answers every key with a wrong value.
func liar(t *testing.T, dbid store.DBID, wrongIndex bool) string {
	t.Helper()
	return fakeMember(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := repl.ReadMessage(br); err != nil {
			return
		}
		repl.WriteMessage(c, &repl.Welcome{Version: repl.FetchVersion, ProcessID: repl.NewProcessID(), DBID: dbid, AppliedIndex: 1 << 40})
		for {
			m, err := repl.ReadMessage(br)
			if err != nil {
				return
			}
			f := m.(*repl.Fetch)
			ans := &repl.Values{ID: f.ID, Applied: 1 << 40}
			for _, it := range f.Items {
				idx := it.Index
				if wrongIndex {
					idx++
				}
				ans.Results = append(ans.Results, repl.FetchResult{Status: repl.FetchOK, Index: idx, Value: []byte("lie")})
			}
			if err := repl.WriteMessage(c, ans); err != nil {
				return
			}
		}
	})
}

// fakeMember listens on loopback and serves every connection with serve
// (then closes it), until the test ends; it returns the address.
func fakeMember(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestPoolRejectsWrongAnswers: a member answering wrong bytes or another
// version is never believed; it is sidelined and the honest replica
// answers.
func TestPoolRejectsWrongAnswers(t *testing.T) {
	for _, wrongIndex := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrong_index=%v", wrongIndex), func(t *testing.T) {
			c := newCluster(t)
			var bad string
			_, px := coldProxy(t, c, 100, func(root, r1, r2 *node) []string {
				bad = liar(t, root.st.DBID(), wrongIndex)
				return []string{bad, r1.addr}
			})
			if errs := readKeys(t, px.st, 200, 100); errs != 0 {
				t.Fatalf("%d reads failed", errs)
			}
			if counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, bad, "bad_answer")) == 0 {
				t.Fatal("the liar was never caught")
			}
		})
	}
}

// TestPoolConfig: defaults and validation.
func TestPoolConfig(t *testing.T) {
	if _, err := New(Config{Database: "x"}, nil); err == nil {
		t.Fatal("no members accepted")
	}
	if _, err := New(Config{Replicas: []string{"a:1"}}, nil); err == nil {
		t.Fatal("no database accepted")
	}
	p, err := New(Config{Database: "x", Replicas: []string{"a:1", "a:1"}, Fallback: []string{"a:1", "b:2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st := p.Status(); len(st) != 2 || st[0].Fallback || !st[1].Fallback {
		t.Fatalf("members %+v: duplicates must collapse, replicas first", st)
	}
}

// bigValue is key k's value in TestPoolWaitsForSlowHealthyMember.
func bigValue(k string, size int) []byte {
	v := make([]byte, size)
	for i := range v {
		v[i] = k[len(k)-1-i%2] + byte(i%7)
	}
	return v
}

// TestPoolWaitsForSlowHealthyMember: a replica behind a thin link
// (4 MiB/s) answers a 3 MiB batch in ~0.75 s, several times the attempt
// timeout. It keeps delivering, so it is waited for: every big read
// succeeds, nothing times out, the member is never sidelined and the
// fall-back is never asked. Then the link stalls: the same big batch is
// given up after AttemptTimeout without a byte (not after the batch's
// multi-second deadline), the member is sidelined, and the fall-back
// answers.
func TestPoolWaitsForSlowHealthyMember(t *testing.T) {
	const (
		// The batch takes longer than an attempt's timeout to cross the
		// link; the timeout and the minimum rate leave room (1.5 s without
		// a byte, 8× below the link's rate) for a loaded machine's stalls.
		nkeys     = 64
		size      = 64 << 10
		attempt   = 1500 * time.Millisecond
		minRate   = 256 << 10
		linkRate  = 2 << 20
		batchTime = time.Duration(nkeys * size * int64(time.Second) / linkRate) // ~2s
	)
	c := newCluster(t)
	root := c.root()
	keys := make([][]byte, nkeys)
	for i := range keys {
		k := fmt.Sprintf("big%02d", i)
		keys[i] = []byte(k)
		if _, err := root.st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: keys[i], Value: bigValue(k, size)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// One more write, so the window (one entry) holds none of the keys.
	fill(t, root.st, 1)
	r1 := c.replica(root.st.DBID(), root.addr)
	r2 := c.replica(root.st.DBID(), root.addr)
	waitApplied(t, r1.st, root.st.AppliedIndex())
	waitApplied(t, r2.st, root.st.AppliedIndex())
	slow := newLink(t, r1.addr, 0)
	slow.rate.Store(linkRate)
	po := store.ProxyOptions{Window: 1, CacheBytes: -1, EvictInterval: time.Millisecond, FetchTimeout: 10 * time.Second}
	c.readCacheBytes = -1 // every read of the proxy fetches
	px := c.proxy(root.st.DBID(), po, Config{Replicas: []string{slow.Addr()}, Fallback: []string{r2.addr},
		AttemptTimeout: attempt, MinFetchRate: minRate, SidelineMin: 5 * time.Second, SidelineMax: 10 * time.Second}, root.addr)
	waitApplied(t, px.st, root.st.AppliedIndex())

	readAll := func() (time.Duration, error) {
		// The read before admitted the values; wait until the keeper
		// evicted them (the budget is 0), so every key is fetched.
		for i := 0; px.st.ProxyStats().CachedBytes >= size; i++ {
			if i == 500 {
				t.Fatalf("fetched values not evicted: %+v", px.st.ProxyStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		start := time.Now()
		_, err := px.st.Lookup(keys, func(_ uint64, i int, v []byte, _ uint64, found bool) error {
			if !found || !bytes.Equal(v, bigValue(string(keys[i]), size)) {
				t.Errorf("%s: found=%v, %d bytes", keys[i], found, len(v))
			}
			return nil
		})
		return time.Since(start), err
	}
	for round := 0; round < 3; round++ {
		d, err := readAll()
		if err != nil {
			t.Fatalf("round %d: big read through the slow member failed after %v: %v", round, d, err)
		}
		t.Logf("round %d: %d keys of %d KiB in %v (attempt timeout %v)", round, nkeys, size>>10, d, attempt)
		for _, r := range []string{"timeout", "error", "aborted"} {
			if n := counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, slow.Addr(), r)); n != 0 {
				t.Errorf("round %d: slow but healthy member: %v requests %s", round, n, r)
			}
		}
		if n := counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, r2.addr, "ok")); n != 0 {
			t.Fatalf("round %d: the fall-back answered %v requests: the slow member was passed over", round, n)
		}
		if d < attempt {
			t.Fatalf("round %d took %v: the link is not slow enough for the test to mean anything (expected ~%v)", round, d, batchTime)
		}
	}
	if n := counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, slow.Addr(), "ok")); n != 3 {
		t.Errorf("slow member answered %v requests, want 3", n)
	}
	if st := px.pool.Status(); !st[0].Up || st[0].Failures != 0 {
		t.Fatalf("slow member sidelined: %+v", st[0])
	}

	// Stalled: no byte passes. The big batch is given up after about
	// AttemptTimeout, not its deadline (AttemptTimeout + 4 MiB at 256 KiB/s).
	slow.stall.Store(true)
	d, err := readAll()
	if err != nil {
		t.Fatalf("big read with the member stalled failed after %v: %v", d, err)
	}
	t.Logf("stalled member: read answered by the fall-back in %v", d)
	if deadline := attempt + time.Duration(nkeys*(size+16)*int64(time.Second)/minRate); d >= deadline/2 {
		t.Errorf("stalled member given up after %v: not detected by its silence (deadline %v)", d, deadline)
	}
	if n := counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, slow.Addr(), "timeout")); n != 1 {
		t.Errorf("stalled member: %v timeouts, want 1", n)
	}
	if n := counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, r2.addr, "ok")); n != 1 {
		t.Errorf("the fall-back answered %v requests, want 1", n)
	}
	if st := px.pool.Status(); st[0].Up || st[0].Failures != 1 {
		t.Fatalf("stalled member not sidelined: %+v", st[0])
	}
}

// TestPoolRefusesValuesTooLargeToFetch: a read needing a value larger
// than a fetch answer can carry fails at once with store.ErrTooLarge,
// counted, without asking any member (it used to ask, and ask again,
// until the read's deadline).
func TestPoolRefusesValuesTooLargeToFetch(t *testing.T) {
	var accepted atomic.Int64
	member := fakeMember(t, func(net.Conn) { accepted.Add(1) })
	db := "too_large_" + fmt.Sprint(dbSeq.Add(1))
	p, err := New(Config{Database: db, Replicas: []string{member}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	items := []store.FetchItem{{Key: []byte("small"), Index: 3, Len: 10}, {Key: []byte("huge"), Index: 7, Len: repl.MaxFetchValueBytes + 1}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = p.Fetch(ctx, 9, items)
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), `"huge"`) {
		t.Fatalf("fetch of a %d-byte value: %v, want store.ErrTooLarge naming the key", items[1].Len, err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("%d connections to the member for a value none can send", n)
	}
	if n := counter(t, p.cfg.Metrics.fetches.WithLabelValues(db, "too_large")); n != 1 {
		t.Fatalf("too_large counted %v times, want 1", n)
	}
	// A value of exactly the limit is asked for.
	items[1].Len = repl.MaxFetchValueBytes
	// The member never answers: the fetch ends once it was asked.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	go func() {
		for accepted.Load() == 0 && ctx2.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel2()
	}()
	if err := p.Fetch(ctx2, 9, items); errors.Is(err, store.ErrTooLarge) || accepted.Load() == 0 {
		t.Fatalf("a value of MaxFetchValueBytes was not asked for: %v, %d connections", err, accepted.Load())
	}
}

// TestPickOrder: a member in service first; then a preferred member last
// known to be behind, before any fall-back (a relay seen behind after a
// burst of writes is asked again rather than bypassed); then fall-backs;
// sidelined members last.
func TestPickOrder(t *testing.T) {
	p, err := New(Config{Database: "pick_" + t.Name(), Replicas: []string{"relay:1", "relay:2"}, Fallback: []string{"replica:1"}}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ms := p.snapshot()
	relay1, relay2, fallback := ms[0], ms[1], ms[2]
	set := func(m *member, applied uint64, sidelined bool) {
		m.mu.Lock()
		m.lastApplied, m.seen = applied, time.Now()
		m.sidelinedUntil = time.Time{}
		if sidelined {
			m.sidelinedUntil = time.Now().Add(time.Hour)
		}
		m.mu.Unlock()
	}
	set(relay1, 10, false)
	set(relay2, 20, false)
	set(fallback, 20, false)
	if m := p.pick(15, 15, map[*member]bool{}); m != relay2 {
		t.Fatalf("need 15: picked %s, want the relay that has it", m.addr)
	}
	if m := p.pick(15, 15, map[*member]bool{relay2: true}); m != relay1 {
		t.Fatalf("need 15, relay2 tried: picked %s, want the relay seen behind before the fall-back", m.addr)
	}
	if m := p.pick(15, 15, map[*member]bool{relay1: true, relay2: true}); m != fallback {
		t.Fatalf("both relays tried: picked %s, want the fall-back", m.addr)
	}
	set(relay2, 20, true)
	if m := p.pick(15, 15, map[*member]bool{relay1: true}); m != fallback {
		t.Fatalf("relay2 sidelined: picked %s, want the fall-back before it", m.addr)
	}
	if m := p.pick(15, 15, map[*member]bool{relay1: true, fallback: true}); m != relay2 {
		t.Fatalf("only the sidelined relay left: picked %v", m)
	}
	if m := p.pick(15, 15, map[*member]bool{relay1: true, relay2: true, fallback: true}); m != nil {
		t.Fatalf("every member tried: picked %s", m.addr)
	}
}

// TestFetchResults reads back what a database's pool counted, and
// nothing of another database's.
func TestFetchResults(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	db := t.Name()
	m.fetches.WithLabelValues(db, "ok").Add(5)
	m.fetches.WithLabelValues(db, "failed").Add(2)
	m.fetches.WithLabelValues(db, "retried").Add(9)
	m.fetches.WithLabelValues(db+"-other", "ok").Add(4)
	if ok, failed := m.FetchResults(db); ok != 5 || failed != 2 {
		t.Fatalf("FetchResults = %v ok, %v failed; want 5 and 2", ok, failed)
	}
	if ok, failed := m.FetchResults(db + "-none"); ok != 0 || failed != 0 {
		t.Fatalf("FetchResults of a database that counted nothing = %v, %v", ok, failed)
	}
	if ok, failed := NewMetrics().FetchResults(db); ok != 0 || failed != 0 {
		t.Fatalf("FetchResults of other Metrics = %v, %v, want nothing of these", ok, failed)
	}
}
