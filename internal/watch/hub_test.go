package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func openStore(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	o.Dir = t.TempDir()
	o.MinFreeBytes = 1
	o.BallastBytes = -1
	o.Logger = slog.New(slog.DiscardHandler)
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startHub runs a hub on st until the test ends; stop stops it early and
// waits for Run to return.
func startHub(t testing.TB, st *store.Store, cfg Config) (h *Hub, stop func()) {
	t.Helper()
	h = NewHub(st, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		h.Run(ctx)
	}()
	stop = func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(60 * time.Second):
			t.Error("hub did not stop within 60s")
		}
	}
	t.Cleanup(stop)
	return h, stop
}

func set(k, v string) wal.Op { return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(v)} }
func del(k string) wal.Op    { return wal.Op{Type: wal.OpDelete, Key: []byte(k)} }

func write(t testing.TB, st *store.Store, ops ...wal.Op) uint64 {
	t.Helper()
	r, err := st.Write(context.Background(), store.Batch{Ops: ops})
	if err != nil {
		t.Error(err)
		return 0
	}
	return r.Index
}

// collect reads from s until it has returned every change through index
// until, failing after 10s.
func collect(t testing.TB, s *Sub, until uint64) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Event
	for s.LastIndex() < until {
		u, err := s.Next(ctx, 20*time.Millisecond)
		if err != nil {
			t.Errorf("Next after %d events (last %d, want %d): %v", len(out), s.LastIndex(), until, err)
			return out
		}
		out = append(out, u.Events()...)
		s.Delivered(u, time.Now())
	}
	return out
}

func describe(evs []Event) []string {
	var out []string
	for _, e := range evs {
		if e.Deleted {
			out = append(out, fmt.Sprintf("%d del %s", e.Index, e.Key))
		} else {
			out = append(out, fmt.Sprintf("%d set %s=%s", e.Index, e.Key, e.Value))
		}
	}
	return out
}

// TestEvents checks sets, deletes and batches arrive in order with their
// values, for a live subscriber and one catching up from index 0.
func TestEvents(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{})
	live, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	i1 := write(t, st, set("a", "1"))
	i2 := write(t, st, set("b", "2"), set("c", "3"), del("a"))
	i3 := write(t, st, del("b"))
	want := fmt.Sprint([]string{
		fmt.Sprintf("%d set a=1", i1),
		fmt.Sprintf("%d set b=2", i2), fmt.Sprintf("%d set c=3", i2), fmt.Sprintf("%d del a", i2),
		fmt.Sprintf("%d del b", i3),
	})
	if got := fmt.Sprint(describe(collect(t, live, i3))); got != want {
		t.Fatalf("live got %s, want %s", got, want)
	}
	back, err := h.Subscribe(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if got := fmt.Sprint(describe(collect(t, back, i3))); got != want {
		t.Fatalf("catch-up got %s, want %s", got, want)
	}
}

func TestPrefix(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{})
	s, err := h.Subscribe([]byte("app/"), st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(t, st, set("other", "x"))
	i2 := write(t, st, set("app/a", "1"), set("ap", "no"), set("app/b", "2"))
	write(t, st, set("zzz", "x"))
	i4 := write(t, st, del("app/a"))
	want := fmt.Sprint([]string{fmt.Sprintf("%d set app/a=1", i2), fmt.Sprintf("%d set app/b=2", i2), fmt.Sprintf("%d del app/a", i4)})
	if got := fmt.Sprint(describe(collect(t, s, i4))); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestHandoff subscribes from past and current indexes while a writer
// runs, with tiny read batches so that catching up takes many rounds and
// races the hub: each subscriber must see exactly the matching entries
// after its from index, strictly increasing, no gap and no duplicate.
func TestHandoff(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{ReadBatchEntries: 3, BufferBatches: 100000})
	const writes, nsubs = 400, 40
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var writerDone atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range writes {
			k := "a/" + fmt.Sprint(i)
			if i%3 == 0 {
				k = "b/" + fmt.Sprint(i)
			}
			if _, err := st.Write(ctx, store.Batch{Ops: []wal.Op{set(k, fmt.Sprint(i))}}); err != nil {
				t.Error(err)
				return
			}
			if i%50 == 0 {
				st.Heartbeat(ctx)
			}
		}
	}()
	type result struct {
		from uint64
		got  []uint64
		err  error
	}
	results := make(chan result, nsubs)
	var subs sync.WaitGroup
	for i := range nsubs {
		time.Sleep(time.Millisecond)
		applied := st.AppliedIndex()
		from := applied / 2 // behind the hub: catches up
		if i%2 == 1 {
			from = applied
		}
		s, err := h.Subscribe([]byte("a/"), from)
		if err != nil {
			t.Fatal(err)
		}
		subs.Add(1)
		go func() {
			defer subs.Done()
			defer s.Close()
			r := result{from: from}
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			defer rcancel()
			for {
				u, err := s.Next(rctx, 10*time.Millisecond)
				if err != nil {
					r.err = err
					break
				}
				for _, e := range u.Events() {
					r.got = append(r.got, e.Index)
				}
				if len(u.Batches) == 0 && writerDone.Load() && u.Index >= st.AppliedIndex() {
					break
				}
			}
			results <- r
		}()
	}
	wg.Wait()
	writerDone.Store(true)
	subs.Wait()
	close(results)
	all, err := st.ReadLog(1, 1<<30, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r := range results {
		n++
		if r.err != nil {
			t.Fatalf("subscriber from %d: %v", r.from, r.err)
		}
		var want []uint64
		for _, e := range all {
			if e.Index > r.from && e.Kind == wal.KindData && string(e.Ops[0].Key[:2]) == "a/" {
				want = append(want, e.Index)
			}
		}
		if fmt.Sprint(r.got) != fmt.Sprint(want) {
			t.Fatalf("subscriber from %d got %v\nwant %v", r.from, r.got, want)
		}
	}
	if n != nsubs {
		t.Fatalf("%d results", n)
	}
}

// TestTruncated: a from index older than the retained log is refused with
// store.ErrLogTruncated; one at the log start minus one is fine.
func TestTruncated(t *testing.T) {
	st := openStore(t, store.Options{Retention: store.Retention{MaxEntries: 5, MaxBytes: -1, MaxAge: -1}})
	h, _ := startHub(t, st, Config{})
	var last uint64
	for i := range 20 {
		last = write(t, st, set("k", fmt.Sprint(i)))
	}
	lr, err := st.LogRange()
	if err != nil {
		t.Fatal(err)
	}
	if lr.First <= 2 {
		t.Fatalf("log not truncated: %+v", lr)
	}
	if _, err := h.Subscribe(nil, lr.First-2); !errors.Is(err, store.ErrLogTruncated) {
		t.Fatalf("Subscribe below the log: %v", err)
	}
	if _, err := h.Subscribe(nil, 0); !errors.Is(err, store.ErrLogTruncated) {
		t.Fatalf("Subscribe from 0: %v", err)
	}
	s, err := h.Subscribe(nil, lr.First-1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := collect(t, s, last); len(got) != int(last-lr.First+1) || got[0].Index != lr.First {
		t.Fatalf("from the log start got %q", describe(got))
	}
}

// waitPos waits until the hub has fanned out index.
func waitPos(t *testing.T, h *Hub, index uint64) {
	t.Helper()
	for range 1000 {
		if p, _ := h.Position(); p >= index {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("hub did not reach %d", index)
}

// TestSlowCut: a subscriber that falls behind its prefix's buffer is cut
// with ErrSlow once it has returned what it read; the others and the hub
// go on, and it resumes from its last index without a gap.
func TestSlowCut(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{BufferBatches: 2})
	slow, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	var got, slowGot []Event
	var last, third uint64
	for i := range 10 {
		last = write(t, st, set("k", fmt.Sprint(i)))
		waitPos(t, h, last) // one hub batch per write
		got = append(got, collect(t, fast, last)...)
		if i < 3 { // the slow one keeps up with the first three only
			slowGot = append(slowGot, collect(t, slow, last)...)
			third = last
		}
	}
	if len(got) != 10 || len(slowGot) != 3 {
		t.Fatalf("fast subscriber got %d events, slow %d", len(got), len(slowGot))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if u, err := slow.Next(ctx, 0); !errors.Is(err, ErrSlow) {
		t.Fatalf("slow subscriber 7 batches behind a buffer of 2: %+v, %v", u, err)
	}
	if _, err := slow.Next(ctx, 0); !errors.Is(err, ErrSlow) {
		t.Fatalf("Next after the cut: %v", err)
	}
	if slow.LastIndex() != third {
		t.Fatalf("slow subscriber last index %d, want %d", slow.LastIndex(), third)
	}
	again, err := h.Subscribe(nil, slow.LastIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if rest := collect(t, again, last); len(rest) != 7 || rest[0].Index != third+1 {
		t.Fatalf("resumed subscriber got %q", describe(rest))
	}
	// The fast one is still served.
	i := write(t, st, set("k", "after"))
	if evs := collect(t, fast, i); len(evs) != 1 {
		t.Fatalf("fast subscriber after the cut got %q", describe(evs))
	}
}

// TestProgress: an idle subscriber gets progress updates, which move with
// heartbeats and changes under other prefixes.
func TestProgress(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{})
	waitPos(t, h, write(t, st, set("x", "1")))
	s, err := h.Subscribe([]byte("p/"), st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	u, err := s.Next(ctx, 10*time.Millisecond)
	if err != nil || len(u.Batches) != 0 || u.Index != st.AppliedIndex() || u.Time.IsZero() {
		t.Fatalf("first progress %+v, %v", u, err)
	}
	hb, err := st.Heartbeat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitPos(t, h, hb)
	if u, err = s.Next(ctx, 10*time.Millisecond); err != nil || len(u.Batches) != 0 || u.Index != hb {
		t.Fatalf("progress after heartbeat %d: %+v, %v", hb, u, err)
	}
	i := write(t, st, set("y", "2"))
	waitPos(t, h, i)
	if u, err = s.Next(ctx, 10*time.Millisecond); err != nil || len(u.Batches) != 0 || u.Index != i {
		t.Fatalf("progress after write %d: %+v, %v", i, u, err)
	}
}

// TestShutdown: stopping the hub ends waiting subscribers promptly and
// refuses new ones.
func TestShutdown(t *testing.T) {
	st := openStore(t, store.Options{})
	h, stop := startHub(t, st, Config{})
	s, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background(), time.Minute)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	stop()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Next after shutdown: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Next did not return within 60s of shutdown")
	}
	if _, err := h.Subscribe(nil, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after shutdown: %v", err)
	}
}

func TestTooManyWatchers(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{Budget: NewBudget(Limits{MaxWatchers: 2}, nil)})
	a, err := h.Subscribe(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Subscribe(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := h.Subscribe(nil, 0); !errors.Is(err, ErrTooManyWatchers) {
		t.Fatalf("third watcher: %v", err)
	}
	if n := testutil.ToFloat64(h.metrics.refused); n != 1 {
		t.Fatalf("refused_total %v after one refusal", n)
	}
	a.Close()
	a.Close() // idempotent
	c, err := h.Subscribe(nil, 0)
	if err != nil {
		t.Fatalf("after a Close: %v", err)
	}
	c.Close()
}

// TestSharedBudget: the hubs of several databases sharing a budget share
// its watcher limit and its write turns.
func TestSharedBudget(t *testing.T) {
	b := NewBudget(Limits{MaxWatchers: 3, WriteConcurrency: 1}, nil)
	ha, _ := startHub(t, openStore(t, store.Options{}), Config{Budget: b})
	hb, _ := startHub(t, openStore(t, store.Options{}), Config{Budget: b})
	var subs []*Sub
	for _, h := range []*Hub{ha, hb, ha} {
		s, err := h.Subscribe(nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs = append(subs, s)
	}
	for _, h := range []*Hub{ha, hb} {
		if _, err := h.Subscribe(nil, 0); !errors.Is(err, ErrTooManyWatchers) || !strings.Contains(err.Error(), "limit 3") {
			t.Fatalf("fourth watcher of the process: %v", err)
		}
	}
	subs[0].Close()
	s, err := hb.Subscribe(nil, 0)
	if err != nil {
		t.Fatalf("after a Close on the other hub: %v", err)
	}
	s.Close()
	// One turn for both hubs: a subscriber of hb holding it delays one of ha.
	ctx := context.Background()
	if _, err := subs[1].Next(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if len(b.turns.slots) != 1 {
		t.Fatal("turn not taken from the shared budget")
	}
	// subs[1] never asks again, so the only way subs[2] gets the turn is
	// the end of subs[1]'s lease, counted before the turn is released.
	// Read in this order, a turn still held after the count was read
	// must add one to it before subs[2] can write (on a loaded machine
	// the lease may already have run out: then nothing can be told).
	expired0 := testutil.ToFloat64(b.metrics.turnLeaseExpired)
	held := subs[1].holding.Load()
	if _, err := subs[2].Next(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if held && testutil.ToFloat64(b.metrics.turnLeaseExpired) == expired0 {
		t.Fatal("a subscriber of the other hub got a turn while the only one was held")
	}
}

// TestManyWatchers: 500 concurrent watchers all receive every change of
// their prefix.
func TestManyWatchers(t *testing.T) {
	st := openStore(t, store.Options{})
	h, _ := startHub(t, st, Config{})
	const n, writes = 500, 50
	from := st.AppliedIndex()
	subs := make([]*Sub, n)
	for i := range subs {
		s, err := h.Subscribe([]byte(fmt.Sprintf("k%d", i%3)), from)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	var last uint64
	want := map[string]int{}
	for i := range writes {
		k := fmt.Sprintf("k%d/%d", i%3, i)
		want[k[:2]]++
		last = write(t, st, set(k, "v"))
	}
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := collect(t, s, last)
			if w := want[fmt.Sprintf("k%d", i%3)]; len(got) != w {
				t.Errorf("watcher %d got %d events, want %d", i, len(got), w)
			}
		}()
	}
	wg.Wait()
}

// TestIdleHub: with no live subscriber the hub reads nothing from the log
// (it moves to the applied position), and subscribers arriving after the
// idle period still get every change: from an index in that period, from
// the start, live from the applied index (whose first progress carries
// the last entry's index and time), and one that keeps leaving and
// coming back while writes go on (the hub switching between idle and
// reading under it). With readIdle (the hub before skipping) the
// counters show every entry read instead.
func TestIdleHub(t *testing.T) {
	for _, readIdle := range []bool{false, true} {
		t.Run(fmt.Sprintf("readIdle=%v", readIdle), func(t *testing.T) {
			st := openStore(t, store.Options{})
			h := NewHub(st, Config{}, nil)
			h.readIdle = readIdle
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { defer close(ran); h.Run(ctx) }()
			defer func() { cancel(); <-ran }()
			read0, skipped0 := testutil.ToFloat64(h.read), testutil.ToFloat64(h.skipped)

			var mid uint64
			for i := range 40 {
				k := fmt.Sprintf("%c/%d", 'a'+i%3, i)
				if i%2 == 0 {
					write(t, st, set(k, fmt.Sprint(i)), set("z/"+k, "x"))
				} else {
					write(t, st, del(fmt.Sprintf("a/%d", i-1)))
				}
				if i == 17 {
					mid = st.AppliedIndex()
				}
			}
			hb, err := st.Heartbeat(ctx)
			if err != nil {
				t.Fatal(err)
			}
			waitPos(t, h, hb)
			head, err := st.Head()
			if err != nil {
				t.Fatal(err)
			}
			if p, tm := h.Position(); p != head.Index || tm.UnixNano() != head.Time {
				t.Fatalf("hub at %d (%v), store head %d (%v)", p, tm, head.Index, unixTime(head.Time))
			}
			read, skipped := testutil.ToFloat64(h.read)-read0, testutil.ToFloat64(h.skipped)-skipped0
			if readIdle && (read != float64(hb) || skipped != 0) || !readIdle && (read != 0 || skipped != float64(hb)) {
				t.Fatalf("idle hub through %d: read %v entries, skipped %v", hb, read, skipped)
			}

			// Arriving after the idle period.
			for _, c := range []struct {
				prefix string
				from   uint64
			}{{"a/", 0}, {"", mid}, {"z/", 3}} {
				s, err := h.Subscribe([]byte(c.prefix), c.from)
				if err != nil {
					t.Fatal(err)
				}
				got, want := describe(collect(t, s, hb)), expected(t, st, c.prefix, c.from)
				s.Close()
				if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
					t.Fatalf("prefix %q from %d after the idle period: got %q, want %q", c.prefix, c.from, got, want)
				}
			}
			live, err := h.Subscribe([]byte("b/"), st.AppliedIndex())
			if err != nil {
				t.Fatal(err)
			}
			u, err := live.Next(ctx, 10*time.Millisecond)
			if err != nil || len(u.Batches) != 0 || u.Index != hb || u.Time.UnixNano() != head.Time {
				t.Fatalf("first progress of a live subscriber after the idle period: %+v, %v (want %d at %v)", u, err, hb, unixTime(head.Time))
			}
			i := write(t, st, set("b/live", "1"))
			if got := describe(collect(t, live, i)); fmt.Sprint(got) != fmt.Sprint([]string{fmt.Sprintf("%d set b/live=1", i)}) {
				t.Fatalf("live subscriber got %q", got)
			}
			live.Close()

			// A subscriber leaving and resuming from its last index
			// while writes go on: every change once, in order.
			from := st.AppliedIndex()
			var wg sync.WaitGroup
			var last atomic.Uint64
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 300 {
					last.Store(write(t, st, set(fmt.Sprintf("c/%d", j), "v")))
				}
			}()
			var got []string
			at := from
			for round := 0; ; round++ {
				if round > 10_000 {
					t.Fatal("resuming subscriber did not finish")
				}
				s, err := h.Subscribe([]byte("c/"), at)
				if err != nil {
					t.Fatal(err)
				}
				if u, err := s.Next(ctx, time.Millisecond); err != nil {
					t.Fatal(err)
				} else {
					got = append(got, describe(u.Events())...)
					s.Delivered(u, time.Now())
				}
				at = s.LastIndex()
				s.Close()
				if round%3 == 0 {
					time.Sleep(time.Millisecond) // idle a moment
				}
				if l := last.Load(); l != 0 && at >= l && len(got) >= 300 {
					break
				}
			}
			wg.Wait()
			if want := expected(t, st, "c/", from); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("resuming subscriber got %d changes, want %d:\n%q\nwant\n%q", len(got), len(want), got, want)
			}
		})
	}
}
