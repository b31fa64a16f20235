package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// dataCentre is a root, one full replica, a relay fetching from the
// replica, and proxies fetching through the relay (behind a link that can
// stall) with the replica (behind a link of its own) as fall-back.
type dataCentre struct {
	c         *cluster
	root      *node
	replica   *node
	relay     *node
	relayLink *link // the proxies' way to the relay
	fallback  *link // the proxies' way to the replica
	proxies   []*node
}

func newDataCentre(t *testing.T, proxies int) *dataCentre {
	c := newCluster(t)
	dc := &dataCentre{c: c, root: c.root()}
	dbid := dc.root.st.DBID()
	dc.replica = c.replica(dbid, dc.root.addr)
	// The relay keeps only its window on disk: what it answers beyond
	// that comes from its replica or from memory.
	po := store.ProxyOptions{Window: 5, CacheBytes: -1, TransientBytes: 1 << 20, EvictInterval: 2 * time.Millisecond}
	dc.relay = c.relayProxy(dbid, po, Config{Replicas: []string{dc.replica.addr}}, dc.root.addr)
	dc.relayLink = newLink(t, dc.relay.addr, 0)
	dc.fallback = newLink(t, dc.replica.addr, 0)
	ppo := store.ProxyOptions{Window: 5, CacheBytes: -1, EvictInterval: 2 * time.Millisecond}
	pc := Config{Replicas: []string{dc.relayLink.Addr()}, Fallback: []string{dc.fallback.Addr()},
		AttemptTimeout: 300 * time.Millisecond, SidelineMin: 20 * time.Millisecond, SidelineMax: 200 * time.Millisecond}
	for range proxies {
		dc.proxies = append(dc.proxies, c.proxy(dbid, ppo, pc, dc.root.addr))
	}
	return dc
}

// write sets n keys prefix0000.. to values naming them, then pads the log
// so that they leave every window, and waits until the relay and every
// proxy evicted them: a proxy that still holds a value answers it itself.
func (dc *dataCentre) write(t *testing.T, prefix string, n int) {
	t.Helper()
	var ops []wal.Op
	for i := range n {
		k := fmt.Sprintf("%s%04d", prefix, i)
		ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte("value of " + k)})
	}
	if _, err := dc.root.st.Write(context.Background(), store.Batch{Ops: ops}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		pad := []wal.Op{{Type: wal.OpSet, Key: []byte(fmt.Sprint("pad", i)), Value: []byte(prefix)}}
		if _, err := dc.root.st.Write(context.Background(), store.Batch{Ops: pad}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range append([]*node{dc.replica, dc.relay}, dc.proxies...) {
		waitApplied(t, n.st, dc.root.st.AppliedIndex())
	}
	for _, n := range append([]*node{dc.relay}, dc.proxies...) {
		waitFor(t, n.st.Name()+"'s eviction down to its window", func() bool { return n.st.ProxyStats().CachedValues <= 5 })
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

// readAll reads keys prefix0000.. through px and checks every value.
func readAll(t *testing.T, px *store.Store, prefix string, n int) {
	t.Helper()
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("%s%04d", prefix, i))
	}
	if _, err := px.Lookup(keys, func(_ uint64, i int, v []byte, _ uint64, found bool) error {
		if want := "value of " + string(keys[i]); !found || string(v) != want {
			return fmt.Errorf("%s: found=%v %q, want %q", keys[i], found, v, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRelayResolvesTheMissesOfItsProxies: proxies with a relay fetch
// through it and never from the replica; the relay answers a value it
// already fetched from its own cache.
func TestRelayResolvesTheMissesOfItsProxies(t *testing.T) {
	dc := newDataCentre(t, 2)
	name := dc.c.name
	dc.write(t, "k", 50)
	readAll(t, dc.proxies[0].st, "k", 50)
	relayFetches := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.replica.addr, "ok"))
	if relayFetches == 0 {
		t.Fatal("the relay did not fetch the misses from the replica")
	}
	// The second proxy misses the same keys: the relay has them.
	readAll(t, dc.proxies[1].st, "k", 50)
	if n := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.replica.addr, "ok")); n != relayFetches {
		t.Fatalf("the relay fetched again (%v requests, was %v) values it holds", n, relayFetches)
	}
	if n := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.relayLink.Addr(), "ok")); n < 2 {
		t.Fatalf("%v requests answered by the relay, want at least one per proxy", n)
	}
	if n := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.fallback.Addr(), "ok")); n != 0 {
		t.Fatalf("proxies asked the replica %v times while the relay answered", n)
	}
	if n := counter(t, dc.c.metrics.fetches.WithLabelValues(name, "fallback")); n != 0 {
		t.Fatalf("%v fall-back requests while the relay answered", n)
	}
}

// TestRelayDownAndBack: while the relay does not answer, proxies fall
// back to the replica (counted) and answers stay correct; once it is
// back, they return to it.
func TestRelayDownAndBack(t *testing.T) {
	dc := newDataCentre(t, 2)
	name := dc.c.name
	dc.write(t, "a", 20)
	readAll(t, dc.proxies[0].st, "a", 20)

	dc.relayLink.stall.Store(true)
	dc.relayLink.cut()
	dc.write(t, "b", 20)
	for _, p := range dc.proxies {
		readAll(t, p.st, "b", 20)
	}
	if n := counter(t, dc.c.metrics.fetches.WithLabelValues(name, "fallback")); n == 0 {
		t.Fatal("no fall-back request counted while the relay was down")
	}
	if n := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.fallback.Addr(), "ok")); n == 0 {
		t.Fatal("the replica answered no proxy while the relay was down")
	}

	dc.relayLink.stall.Store(false)
	before := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.relayLink.Addr(), "ok"))
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; counter(t, dc.c.metrics.replicaRequests.WithLabelValues(name, dc.relayLink.Addr(), "ok")) == before; round++ {
		if time.Now().After(deadline) {
			t.Fatal("the proxies did not return to the relay")
		}
		prefix := fmt.Sprintf("c%d_", round)
		dc.write(t, prefix, 5)
		readAll(t, dc.proxies[round%2].st, prefix, 5)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelayRefusedWithoutTheRelayRole: a proxy that is not a relay
// refuses fetch connections, so a proxy naming it falls back.
func TestRelayRefusedWithoutTheRelayRole(t *testing.T) {
	dc := newDataCentre(t, 0)
	dbid := dc.root.st.DBID()
	plain := dc.c.proxy(dbid, store.ProxyOptions{Window: 5}, Config{Replicas: []string{dc.replica.addr}}, dc.root.addr)
	dc.c.serve(plain) // not a relay
	px := dc.c.proxy(dbid, store.ProxyOptions{Window: 5, CacheBytes: -1}, Config{Replicas: []string{plain.addr}, Fallback: []string{dc.replica.addr},
		SidelineMin: 20 * time.Millisecond, SidelineMax: 200 * time.Millisecond}, dc.root.addr)
	dc.proxies = append(dc.proxies, px) // plain keeps what it applies: not waited for
	dc.write(t, "k", 10)
	readAll(t, px.st, "k", 10)
	if n := counter(t, dc.c.metrics.replicaRequests.WithLabelValues(dc.c.name, plain.addr, "error")); n == 0 {
		t.Fatal("a proxy that is not a relay was not refused")
	}
	if n := counter(t, dc.c.metrics.fetches.WithLabelValues(dc.c.name, "fallback")); n == 0 {
		t.Fatal("no fall-back counted")
	}
}
