package proxy

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
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
		k := fmt.Sprintf("k%03d", rand.IntN(keys))
		_, err := px.Lookup([][]byte{[]byte(k)}, func(_ uint64, _ int, v []byte, _ uint64, found bool) error {
			if !found || string(v) != string(value(k, 0)) {
				t.Errorf("%s: found=%v %q", k, found, v)
			}
			return nil
		})
		if err != nil {
			errs++
			t.Logf("read %s: %v", k, err)
		}
	}
	return errs
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
		if n := counter(t, mReplicaRequests.WithLabelValues(c.name, a, "ok")); n < 10 {
			t.Errorf("replica %s answered %v requests: not spread", a, n)
		}
	}
	if counter(t, mFetches.WithLabelValues(c.name, "ok")) == 0 {
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
	if counter(t, mReplicaRequests.WithLabelValues(c.name, dead, "error")) == 0 {
		t.Fatal("dead member never counted as failing")
	}
	if counter(t, mReplicaRequests.WithLabelValues(c.name, flaky.Addr(), "error")) == 0 {
		t.Fatal("cut connections never failed a request: the test did not exercise retries")
	}
	if counter(t, mFetches.WithLabelValues(c.name, "retried")) == 0 {
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
			if counter(t, mReplicaRequests.WithLabelValues(c.name, bad, "bad_answer")) == 0 {
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
