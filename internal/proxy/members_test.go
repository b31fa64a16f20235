package proxy

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

func TestPlanMembers(t *testing.T) {
	pm := func(addr string, fallback bool) plannedMember { return plannedMember{addr, fallback} }
	cases := []struct {
		name                string
		cur                 []plannedMember
		preferred, fallback []string
		want                memberPlan
	}{
		{name: "from nothing", preferred: []string{"r1", "r2"}, fallback: []string{"f1"},
			want: memberPlan{add: []plannedMember{pm("r1", false), pm("r2", false), pm("f1", true)}}},
		{name: "same members, nothing to do", cur: []plannedMember{pm("r1", false), pm("f1", true)},
			preferred: []string{"r1"}, fallback: []string{"f1"}},
		{name: "order alone is no change", cur: []plannedMember{pm("r1", false), pm("r2", false)},
			preferred: []string{"r2", "r1"}},
		{name: "a relay dies, another is elected", cur: []plannedMember{pm("r1", false), pm("r2", false), pm("f1", true)},
			preferred: []string{"r2", "r3"}, fallback: []string{"f1"},
			want: memberPlan{add: []plannedMember{pm("r3", false)}, retire: []string{"r1"}}},
		{name: "no relay left: fall-backs only", cur: []plannedMember{pm("r1", false), pm("f1", true)},
			fallback: []string{"f1"}, want: memberPlan{retire: []string{"r1"}}},
		{name: "elected relay: its fall-backs become preferred", cur: []plannedMember{pm("r1", false), pm("f1", true)},
			preferred: []string{"f1"},
			want:      memberPlan{retire: []string{"r1"}, retier: []plannedMember{pm("f1", false)}}},
		{name: "named twice: preferred wins, duplicates and empties ignored", cur: nil,
			preferred: []string{"a", "", "a"}, fallback: []string{"a", "b", "b", ""},
			want: memberPlan{add: []plannedMember{pm("a", false), pm("b", true)}}},
		{name: "everything goes", cur: []plannedMember{pm("a", false), pm("b", true)},
			want: memberPlan{retire: []string{"a", "b"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := planMembers(c.cur, c.preferred, c.fallback)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("planMembers(%v, %v, %v)\n got %+v\nwant %+v", c.cur, c.preferred, c.fallback, got, c.want)
			}
			if got.empty() != (len(c.want.add)+len(c.want.retire)+len(c.want.retier) == 0) {
				t.Fatalf("empty() = %v for %+v", got.empty(), got)
			}
		})
	}
}

func (l *link) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// TestSetMembersDrainsRetiredMember: a member retired while it answers a
// request finishes it (the read succeeds with the right value); only
// then do its connections close and its metric series go. The pool
// fetches from the new member from then on.
func TestSetMembersDrainsRetiredMember(t *testing.T) {
	c := newCluster(t)
	c.readCacheBytes = -1 // every read of a key out of the window is a fetch
	var slow *link
	var r2addr string
	_, px := coldProxy(t, c, 50, func(root, r1, r2 *node) []string {
		slow = newLink(t, r1.addr, 0)
		r2addr = r2.addr
		return []string{slow.Addr()}
	})
	px.pool.cfg.AttemptTimeout = time.Minute // the stalled request is waited for, not timed out
	old := px.pool.snapshot()[0]
	// Both connections dialed first: the stall is of a request, not of a
	// handshake.
	if errs := readKeys(t, px.st, 10, 40); errs != 0 {
		t.Fatalf("%d reads failed", errs)
	}
	slow.stall.Store(true)
	done := make(chan int, 1)
	// A key out of the window and never read: a fresh fetch. (A key read
	// just before may still be held until the keeper's next pass.)
	go func() {
		if !readKey(t, px.st, "k045") {
			done <- 1
			return
		}
		done <- 0
	}()
	waitFor(t, "the read in flight on the stalled member", func() bool { return old.inflight.Load() == 1 })

	if !px.pool.SetMembers([]string{r2addr}, nil) {
		t.Fatal("SetMembers reported no change")
	}
	if px.pool.SetMembers([]string{r2addr}, nil) {
		t.Fatal("SetMembers with the same members reported a change")
	}
	if st := px.pool.Status(); len(st) != 1 || st[0].Addr != r2addr {
		t.Fatalf("status after the change: %+v", st)
	}
	labels := map[string]string{"db": c.name, "replica": slow.Addr()}
	if seriesOf(t, c.metrics, "qs_proxy_replica_up", labels) != 1 || slow.open() == 0 {
		t.Fatalf("the retired member was closed while it still answered a request (%d series, %d connections)",
			seriesOf(t, c.metrics, "qs_proxy_replica_up", labels), slow.open())
	}
	slow.stall.Store(false)
	if errs := <-done; errs != 0 {
		t.Fatalf("the read in flight on the retired member failed")
	}
	waitFor(t, "the retired member's connections to close", func() bool { return slow.open() == 0 })
	for _, name := range []string{"qs_proxy_replica_up", "qs_proxy_replica_latency_seconds", "qs_proxy_replica_applied_index", "qs_proxy_replica_requests_total"} {
		if n := seriesOf(t, c.metrics, name, labels); n != 0 {
			t.Errorf("%s: %d series of the retired member left", name, n)
		}
	}
	px.pool.memberMu.Lock()
	draining := len(px.pool.draining)
	px.pool.memberMu.Unlock()
	if draining != 0 {
		t.Fatalf("%d members still draining", draining)
	}
	if errs := readKeys(t, px.st, 50, 50); errs != 0 {
		t.Fatalf("%d reads failed through the new member", errs)
	}
	if counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, r2addr, "ok")) == 0 {
		t.Fatal("the new member answered nothing")
	}
	if seriesOf(t, c.metrics, "qs_proxy_member_changes_total", map[string]string{"db": c.name, "change": "retired"}) != 1 ||
		valueIn(t, c.metrics, "qs_proxy_members", map[string]string{"db": c.name, "tier": "preferred"}) != 1 {
		t.Fatal("membership change not counted")
	}
}

// TestMembershipChurnDuringReads: readers run while the pool's members
// change again and again (relays come and go, replicas move between the
// tiers, the same address leaves and comes back): no read fails and no
// value is wrong, and at the end only the last members hold connections
// and metric series.
func TestMembershipChurnDuringReads(t *testing.T) {
	c := newCluster(t)
	c.readCacheBytes = -1
	var r1, r2 *node
	_, px := coldProxy(t, c, 200, func(root, a, b *node) []string {
		r1, r2 = a, b
		return []string{a.addr}
	})
	// Several ways to each replica, each a distinct member address.
	var links []*link
	for i := range 6 {
		target := r1.addr
		if i%2 == 1 {
			target = r2.addr
		}
		links = append(links, newLink(t, target, time.Duration(i%3)*time.Millisecond))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, failed atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				failed.Add(int64(readKeys(t, px.st, 10, 200)))
				reads.Add(10)
			}
		}()
	}
	changes := 0
	for i := range 120 {
		a, b := links[i%6], links[(i+1)%6]
		switch i % 4 {
		case 0:
			px.pool.SetMembers([]string{a.Addr(), b.Addr()}, []string{r2.addr})
		case 1:
			px.pool.SetMembers([]string{b.Addr()}, []string{r1.addr, a.Addr()})
		case 2:
			px.pool.SetMembers(nil, []string{a.Addr(), r2.addr})
		case 3:
			px.pool.SetMembers([]string{r1.addr}, []string{b.Addr()})
		}
		changes++
		time.Sleep(3 * time.Millisecond)
	}
	final := links[0]
	px.pool.SetMembers([]string{final.Addr()}, []string{r2.addr})
	// Let the readers go on a little with the final members.
	before := reads.Load()
	waitFor(t, "reads after the last change", func() bool { return reads.Load() >= before+40 })
	stop.Store(true)
	wg.Wait()
	if t.Failed() {
		t.Fatal("wrong values read while the members changed")
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d reads failed while the members changed %d times", n, reads.Load(), changes)
	}
	t.Logf("%d reads, 0 failed, 0 wrong, across %d membership changes", reads.Load(), changes)
	for _, l := range links[1:] {
		waitFor(t, fmt.Sprintf("the connections of retired %s to close", l.Addr()), func() bool { return l.open() == 0 })
		if n := seriesOf(t, c.metrics, "qs_proxy_replica_up", map[string]string{"db": c.name, "replica": l.Addr()}); n != 0 {
			t.Errorf("retired %s keeps %d replica_up series", l.Addr(), n)
		}
	}
	if n := seriesOf(t, c.metrics, "qs_proxy_replica_up", map[string]string{"db": c.name, "replica": r1.addr}); n != 0 {
		t.Errorf("retired %s keeps its replica_up series", r1.addr)
	}
	st := px.pool.Status()
	got := map[string]bool{}
	for _, m := range st {
		got[m.Addr] = m.Fallback
	}
	if want := map[string]bool{final.Addr(): false, r2.addr: true}; !reflect.DeepEqual(got, want) {
		t.Fatalf("final members %+v, want %v (address: fallback)", st, want)
	}
}

// TestDynamicPoolStartsEmpty: a pool whose members come later may start
// with none (any other pool needs one); a read then waits for a member
// until its deadline, and succeeds once one is given.
func TestDynamicPoolStartsEmpty(t *testing.T) {
	if _, err := New(Config{Database: "d"}, nil); err == nil {
		t.Fatal("a static pool without members was made")
	}
	c := newCluster(t)
	c.readCacheBytes = -1
	root := c.root()
	fill(t, root.st, 20)
	r1 := c.replica(root.st.DBID(), root.addr)
	waitApplied(t, r1.st, root.st.AppliedIndex())
	po := store.ProxyOptions{Window: 1, CacheBytes: -1, EvictInterval: time.Millisecond}
	px := c.proxy(root.st.DBID(), po, Config{Dynamic: true}, root.addr)
	waitApplied(t, px.st, root.st.AppliedIndex())
	if st := px.pool.Status(); len(st) != 0 {
		t.Fatalf("members before any were given: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := px.pool.Fetch(ctx, root.st.AppliedIndex(), []store.FetchItem{{Key: []byte("k000"), Index: 1}})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "no member") {
		t.Fatalf("a fetch from a pool with no member: %v", err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		px.pool.SetMembers(nil, []string{r1.addr})
	}()
	if errs := readKeys(t, px.st, 20, 19); errs != 0 {
		t.Fatalf("%d reads failed", errs)
	}
	if counter(t, c.metrics.fetches.WithLabelValues(c.name, "fallback")) == 0 {
		t.Fatal("reads from the only (fall-back) member not counted as fall-backs")
	}
}
