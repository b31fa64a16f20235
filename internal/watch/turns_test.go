package watch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// expected returns the changes under prefix after index from, read back
// from the log: what a subscriber must receive, in order.
func expected(t *testing.T, st *store.Store, prefix string, from uint64) []string {
	t.Helper()
	all, err := st.ReadLog(from+1, 1<<30, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return describe(appendMatching(nil, all, []byte(prefix)))
}

// TestStormExactlyOnce: many subscribers on shared prefixes under a write
// budget far below the storm get every change of their prefix exactly
// once, in order; they get them coalesced (several batches per write),
// and the hub's writes stay within the budget.
func TestStormExactlyOnce(t *testing.T) {
	st := openStore(t, store.Options{})
	const rate, burst = 2000, 4
	h, _ := startHub(t, st, Config{Budget: NewBudget(Limits{WriteRate: rate, WriteBurst: burst, WriteConcurrency: 1}, nil), CoalesceBytes: 200})
	prefixes := []string{"a/", "b/", ""}
	const nsubs, writes = 300, 200
	from := st.AppliedIndex()
	subs := make([]*Sub, nsubs)
	for i := range subs {
		s, err := h.Subscribe([]byte(prefixes[i%len(prefixes)]), from)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	start := time.Now()
	var last uint64
	for i := range writes {
		ops := []wal.Op{set(fmt.Sprintf("a/%d", i), fmt.Sprint(i))}
		if i%3 == 0 {
			ops = append(ops, set(fmt.Sprintf("b/%d", i), fmt.Sprint("v", i)), del(fmt.Sprintf("a/%d", i-3)))
		}
		last = write(t, st, ops...)
	}
	var turns, coalesced atomic.Int64
	got := make([][]Event, nsubs)
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for s.LastIndex() < last {
				u, err := s.Next(ctx, 50*time.Millisecond)
				if err != nil {
					t.Errorf("subscriber %d after %d events: %v", i, len(got[i]), err)
					return
				}
				turns.Add(1)
				if len(u.Batches) > 1 {
					coalesced.Add(1)
				}
				got[i] = append(got[i], u.Events()...)
				s.Delivered(u, time.Now())
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i := range subs {
		want := expected(t, st, prefixes[i%len(prefixes)], from)
		if fmt.Sprint(describe(got[i])) != fmt.Sprint(want) {
			t.Fatalf("subscriber %d (prefix %q) got %d changes %q\nwant %d %q", i, prefixes[i%len(prefixes)], len(got[i]), describe(got[i]), len(want), want)
		}
	}
	if max := rate*elapsed.Seconds() + burst + 1; float64(turns.Load()) > max {
		t.Fatalf("%d writes in %v: over the budget of %d/s (at most %.0f)", turns.Load(), elapsed, rate, max)
	}
	if coalesced.Load() == 0 {
		t.Fatal("no write carried more than one batch")
	}
	t.Logf("%d subscribers, %d writes in %v, %d of them coalesced", nsubs, turns.Load(), elapsed, coalesced.Load())
}

// TestTurnConcurrency: at most WriteConcurrency subscribers hold a turn at
// once (more only after a turn's lease expired).
func TestTurnConcurrency(t *testing.T) {
	st := openStore(t, store.Options{})
	const k = 2
	h, _ := startHub(t, st, Config{Budget: NewBudget(Limits{WriteConcurrency: k, WriteRate: 1e6, WriteBurst: 1000}, nil)})
	expired0 := testutil.ToFloat64(h.metrics.turnLeaseExpired)
	from := st.AppliedIndex()
	var last uint64
	for i := range 20 {
		last = write(t, st, set(fmt.Sprint("k", i), "v"))
	}
	var active, peak atomic.Int64
	var wg sync.WaitGroup
	for range 30 {
		s, err := h.Subscribe(nil, from)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for s.LastIndex() < last {
				u, err := s.Next(ctx, 10*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				n := active.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(100 * time.Microsecond) // the write
				active.Add(-1)
				s.Delivered(u, time.Now())
			}
		}()
	}
	wg.Wait()
	expired := testutil.ToFloat64(h.metrics.turnLeaseExpired) - expired0
	if float64(peak.Load()) > k+expired {
		t.Fatalf("%d turns at once, limit %d (%.0f leases expired)", peak.Load(), k, expired)
	}
}

// TestTurnLease: a subscriber that holds its turn without writing (a
// write blocked on a client that does not read) holds up the others for
// the lease only; the slots stay balanced.
func TestTurnLease(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{Budget: NewBudget(Limits{WriteConcurrency: 1}, nil)})
	expired0 := testutil.ToFloat64(h.metrics.turnLeaseExpired)
	ctx := context.Background()
	stuck, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	other, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	// Taken before the stuck subscriber's turn starts, so that the second
	// turn, which starts at the lease's end, comes a full lease later
	// however late this goroutine runs.
	start := time.Now()
	if _, err := stuck.Next(ctx, 0); err != nil { // holds the only turn, never Delivered
		t.Fatal(err)
	}
	u, err := other.Next(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < turnLease || d > 30*time.Second {
		t.Fatalf("second subscriber got its turn after %v (lease %v)", d, turnLease)
	}
	// The stuck turn's lease ran out and was counted. The second
	// subscriber's own lease may run out too before this reads the counter
	// (a descheduled test on a loaded machine), and count once more.
	if stuck.holding.Load() {
		t.Fatal("the stuck subscriber still holds its turn")
	}
	if n := testutil.ToFloat64(h.metrics.turnLeaseExpired) - expired0; n < 1 || n > 2 {
		t.Fatalf("%.0f lease expiries counted, want the stuck one (and at most the second's)", n)
	}
	other.Delivered(u, time.Now())
	if _, err := stuck.Next(ctx, 0); err != nil { // its old turn is not given back twice
		t.Fatal(err)
	}
	stuck.Close()
	other.Close()
	if n := len(h.budget.turns.slots); n != 0 {
		t.Fatalf("%d turns held after every subscriber closed", n)
	}
}

// TestHubFellBehindLog: a hub whose next entry was dropped from the log
// ends its live subscribers with the re-read error once they have what
// came before, and serves new ones from the log start.
func TestHubFellBehindLog(t *testing.T) {
	st := openStore(t, store.Options{Retention: store.Retention{MaxEntries: 5, MaxBytes: -1, MaxAge: -1}})
	h := NewHub(st, Config{}, nil) // not running yet: it falls behind
	s, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last uint64
	for i := range 30 {
		last = write(t, st, set("k", fmt.Sprint(i)))
	}
	if lr, err := st.LogRange(); err != nil || lr.First <= 2 {
		t.Fatalf("log not truncated: %+v, %v", lr, err)
	}
	cut0 := testutil.ToFloat64(h.metrics.cut[cutTruncated])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
	defer ncancel()
	var got int
	for {
		u, err := s.Next(nctx, 20*time.Millisecond)
		if err != nil {
			if !errors.Is(err, store.ErrLogTruncated) {
				t.Fatalf("live subscriber of a hub behind the log: %v", err)
			}
			break
		}
		got += len(u.Batches)
	}
	if got != 0 {
		t.Fatalf("%d batches before the re-read error", got)
	}
	if testutil.ToFloat64(h.metrics.cut[cutTruncated]) != cut0+1 {
		t.Fatal("cut not counted as truncated")
	}
	lr, _ := st.LogRange()
	again, err := h.Subscribe(nil, lr.First-1)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if evs := collect(t, again, last); len(evs) != int(last-lr.First+1) {
		t.Fatalf("new subscriber from the log start got %d events", len(evs))
	}
}

// TestShutdownMany: stopping the hub ends at once subscribers waiting for
// changes, waiting for a write turn and holding one, each with ErrClosed,
// counted as shutdown cuts.
func TestShutdownMany(t *testing.T) {
	st := openStore(t, store.Options{})
	h, stop := startHub(t, st, Config{Budget: NewBudget(Limits{WriteRate: 1, WriteBurst: 1, WriteConcurrency: 1}, nil)})
	cut0 := testutil.ToFloat64(h.metrics.cut[cutShutdown])
	const n = 200
	errs := make(chan error, n)
	subs := make([]*Sub, n)
	for i := range subs {
		s, err := h.Subscribe([]byte(fmt.Sprint(i%7)), st.AppliedIndex())
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	for i, s := range subs {
		go func() {
			defer s.Close()
			ctx := context.Background()
			wait := time.Duration(0) // half want a turn at once: one gets the budget's only turn, the others wait
			if i%2 == 1 {
				wait = time.Minute // the others wait for changes
			}
			for {
				u, err := s.Next(ctx, wait)
				wait = time.Minute
				if err != nil {
					errs <- err
					return
				}
				s.Delivered(u, time.Now())
			}
		}()
	}
	// The subscribers that want a turn at once queue for it (less those
	// that got one: about one a second).
	deadline := time.Now().Add(60 * time.Second)
	for w := testutil.ToFloat64(h.metrics.turnWaiting); w < n/2-2; w = testutil.ToFloat64(h.metrics.turnWaiting) {
		if time.Now().After(deadline) {
			t.Fatalf("%.0f subscribers waiting for a turn after 60s", w)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	stop()
	for i := range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("subscriber ended with %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d subscribers still waiting 60s after shutdown", n-i, n)
		}
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	if got := testutil.ToFloat64(h.metrics.cut[cutShutdown]) - cut0; got != n {
		t.Fatalf("%.0f shutdown cuts counted, want %d", got, n)
	}
	if _, err := h.Subscribe(nil, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after shutdown: %v", err)
	}
}

func TestProgressWait(t *testing.T) {
	c := Config{ProgressInterval: time.Second}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := c.ProgressWait()
		if d < 750*time.Millisecond || d > 1250*time.Millisecond {
			t.Fatalf("ProgressWait %v outside 1s ±25%%", d)
		}
		seen[d.Round(10*time.Millisecond)] = true
	}
	if len(seen) < 20 {
		t.Fatalf("ProgressWait hardly varies: %d distinct values", len(seen))
	}
}

// TestExactlyOnceVaryingRate: while the budget's rate changes every
// millisecond (between 20 and 20,000 turns/s, as the controller may move
// it, and faster), its controller runs too (it moves the rate and holds
// every turn for its quiet periods) and changes keep coming, live and
// catching-up subscribers of shared prefixes each get every change of
// their prefix exactly once, in order.
func TestExactlyOnceVaryingRate(t *testing.T) {
	st := openStore(t, store.Options{})
	b := NewBudget(Limits{WriteRate: 20_000, WriteBurst: 8, WriteConcurrency: 1}, nil)
	runBudget(t, b)
	h, _ := startHub(t, st, Config{Budget: b, CoalesceBytes: 300})
	prefixes := []string{"a/", "b/", ""}
	const nsubs, writes = 90, 300
	from := st.AppliedIndex()

	stopRates := make(chan struct{})
	ratesDone := make(chan int)
	go func() {
		r := rand.New(rand.NewPCG(3, 4))
		n := 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopRates:
				ratesDone <- n
				return
			case <-tick.C:
				b.turns.setRate(20 * math.Pow(1000, r.Float64())) // 20 to 20,000, log-uniform
				n++
			}
		}
	}()

	var last atomic.Uint64
	writerDone := make(chan struct{})
	go func() { // changes arrive while subscribers read
		defer close(writerDone)
		for i := range writes {
			ops := []wal.Op{set(fmt.Sprintf("a/%d", i), fmt.Sprint(i))}
			if i%3 == 0 {
				ops = append(ops, set(fmt.Sprintf("b/%d", i), fmt.Sprint("v", i)), del(fmt.Sprintf("a/%d", i-3)))
			}
			last.Store(write(t, st, ops...))
			if i%50 == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()

	got := make([][]Event, nsubs)
	var wg sync.WaitGroup
	for i := range nsubs {
		s, err := h.Subscribe([]byte(prefixes[i%len(prefixes)]), from) // the first ones are live, later ones catch up
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for {
				select {
				case <-writerDone:
					if s.LastIndex() >= last.Load() {
						return
					}
				default:
				}
				u, err := s.Next(ctx, 20*time.Millisecond)
				if err != nil {
					t.Errorf("subscriber %d after %d events: %v", i, len(got[i]), err)
					return
				}
				got[i] = append(got[i], u.Events()...)
				s.Delivered(u, time.Now())
			}
		}()
		if i%10 == 9 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	wg.Wait()
	close(stopRates)
	if n := <-ratesDone; n < 20 {
		t.Fatalf("the rate changed only %d times", n)
	}
	for i := range nsubs {
		want := expected(t, st, prefixes[i%len(prefixes)], from)
		if fmt.Sprint(describe(got[i])) != fmt.Sprint(want) {
			t.Fatalf("subscriber %d (prefix %q) got %d changes\nwant %d", i, prefixes[i%len(prefixes)], len(got[i]), len(want))
		}
	}
}

// TestTurnsPause: while turns are paused (the budget's quiet periods) no
// turn starts, a waiter that is cancelled gives its slot back, and resume
// lets the waiters go.
func TestTurnsPause(t *testing.T) {
	ts := newTurns(1, 1e6, 8, NewMetrics())
	ts.pause()
	ts.pause() // twice: one resume ends it
	got := make(chan error, 3)
	ctx, cancel := context.WithCancel(context.Background())
	for range 2 {
		go func() {
			var tm *time.Timer
			err := ts.acquire(context.Background(), nil, &tm)
			if err == nil {
				ts.release()
			}
			got <- err
		}()
	}
	go func() { // cancelled while paused: must not keep a slot
		var tm *time.Timer
		got <- ts.acquire(ctx, nil, &tm)
	}()
	select {
	case err := <-got:
		t.Fatalf("a turn started while paused (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("cancelled waiter still waits")
	}
	ts.resume()
	for range 2 {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("waiters did not get their turn after resume")
		}
	}
	if len(ts.slots) != 0 {
		t.Fatalf("%d slots held after every turn ended", len(ts.slots))
	}
}
