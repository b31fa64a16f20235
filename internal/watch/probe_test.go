package watch

import (
	"context"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// hogScheduler keeps every P busy with goroutines that are always
// runnable (they yield, never block): the Go scheduler then polls the
// network only from sysmon, every 10ms, as when thousands of watchers are
// woken at once. It returns a function that stops them.
func hogScheduler() (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				runtime.Gosched()
			}
		}()
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// probeFor sends a probe every 2ms for d and returns the 90th percentile
// of the delays.
func probeFor(t *testing.T, p *probe, d time.Duration) time.Duration {
	t.Helper()
	var ds []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(2 * time.Millisecond)
		p.send(time.Now())
	}
	time.Sleep(20 * time.Millisecond)
	ds = p.take(ds, time.Now(), time.Hour)
	if len(ds) < 10 {
		t.Fatalf("%d probes came back in %v", len(ds), d)
	}
	return quantile(ds, 0.9)
}

// TestProbeSeesSchedulerQueue: the probe's delay (what a goroutine woken
// by the network waits) grows by milliseconds when runnable goroutines
// keep every P busy.
func TestProbeSeesSchedulerQueue(t *testing.T) {
	schedulerBench(t)
	p, err := newProbe(NewMetrics().wakeDelay)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		p.readLoop()
	}()
	defer func() {
		p.close()
		<-ended
	}()
	idle := probeFor(t, p, 300*time.Millisecond)
	stop := hogScheduler()
	hogged := probeFor(t, p, 300*time.Millisecond)
	stop()
	t.Logf("probe p90: %v idle, %v with the scheduler hogged", idle, hogged)
	if hogged < 2*time.Millisecond || hogged < 2*idle {
		t.Fatalf("probe p90 %v with every P busy (idle %v): the probe does not see the queue", hogged, idle)
	}
}

// TestProbeInFlight: a probe that has not come back counts with its age
// once it is late; one in flight blocks the next send; close ends
// readLoop.
func TestProbeInFlight(t *testing.T) {
	p, err := newProbe(NewMetrics().wakeDelay)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	p.send(t0) // no readLoop yet: it stays in flight
	p.send(t0.Add(time.Millisecond))
	if got := p.sent.Load(); got != t0.UnixNano() {
		t.Fatalf("second send replaced the probe in flight: sent %d, want %d", got, t0.UnixNano())
	}
	if ds := p.take(nil, t0.Add(time.Millisecond), 2*time.Millisecond); len(ds) != 0 {
		t.Fatalf("a probe in flight for 1ms counted (late 2ms): %v", ds)
	}
	if ds := p.take(nil, t0.Add(5*time.Millisecond), 2*time.Millisecond); len(ds) != 1 || ds[0] != 5*time.Millisecond {
		t.Fatalf("a probe in flight for 5ms (late 2ms) counted as %v", ds)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		p.readLoop()
	}()
	deadline := time.Now().Add(60 * time.Second)
	for p.sent.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ds := p.take(nil, time.Now(), time.Hour); len(ds) != 1 || ds[0] < 0 {
		t.Fatalf("the probe came back as %v", ds)
	}
	p.close()
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("readLoop still running 60s after close")
	}
	p.send(time.Now()) // after close: no panic, nothing in flight
	if p.sent.Load() != 0 {
		t.Fatal("a send after close left a probe in flight")
	}
}

// runBudget runs b until the test ends.
func runBudget(t *testing.T, b *Budget) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ran:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Budget.Run did not return within 60s")
		}
	})
}

// waitRate waits up to d for cond(rate).
func waitRate(b *Budget, d time.Duration, cond func(float64) bool) (float64, bool) {
	for end := time.Now().Add(d); ; {
		r := b.Rate()
		if cond(r) {
			return r, true
		}
		if time.Now().After(end) {
			return r, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBudgetAdapts: with watchers writing as fast as the budget lets
// them, the budget cuts its rate to the floor while goroutines woken by
// the network wait (the scheduler hogged), and raises it again once they
// do not.
func TestBudgetAdapts(t *testing.T) {
	schedulerBench(t)
	const ceiling = 10_000
	b := NewBudget(Limits{WriteRate: ceiling, WriteBurst: 8, WriteConcurrency: 1}, nil)
	if err := b.admit(); err != nil {
		t.Fatal(err)
	}
	defer b.leave()
	floor := b.ctl.floor(1, ceiling)
	cuts0 := testutil.ToFloat64(b.metrics.decisions[decideCut])
	runBudget(t, b)
	// Writers wanting more turns than the budget gives.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tm *time.Timer
			for b.turns.acquire(ctx, nil, &tm) == nil {
				b.turns.release()
			}
		}()
	}

	stop := hogScheduler()
	r, ok := waitRate(b, 60*time.Second, func(r float64) bool { return r <= floor })
	stop()
	if !ok {
		t.Fatalf("rate %.0f 60s into a hogged scheduler, want the floor %.0f", r, floor)
	}
	if testutil.ToFloat64(b.metrics.decisions[decideCut]) <= cuts0 {
		t.Fatal("cuts not counted")
	}
	if testutil.ToFloat64(b.metrics.writeRate) > floor || b.Signal() <= b.ctl.Target {
		t.Fatalf("metrics: write_rate %v, signal %v", testutil.ToFloat64(b.metrics.writeRate), b.Signal())
	}
	r, ok = waitRate(b, 60*time.Second, func(r float64) bool { return r >= 4*floor })
	if !ok {
		t.Fatalf("rate %.0f 60s after the hog stopped, writes waiting (floor %.0f)", r, floor)
	}
}

// TestBudgetQuiet: with watchers that hardly write, the budget does not
// probe (its wake-ups would cost more than the writes) and keeps its
// rate, even while the scheduler is hogged; once writes are busy it
// probes again.
func TestBudgetQuiet(t *testing.T) {
	schedulerBench(t)
	b := NewBudget(Limits{WriteRate: 10_000}, nil)
	if err := b.admit(); err != nil {
		t.Fatal(err)
	}
	defer b.leave()
	runBudget(t, b)
	probes := func() uint64 {
		m := &dto.Metric{}
		if err := b.metrics.wakeDelay.Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	time.Sleep(250 * time.Millisecond) // the first window probes: not known to be quiet yet
	p0 := probes()
	stop := hogScheduler()
	time.Sleep(500 * time.Millisecond)
	stop()
	if n := probes() - p0; n > 1 { // one may have been in flight
		t.Fatalf("%d probes while no watcher wrote", n)
	}
	if r := b.Rate(); r != 10_000 {
		t.Fatalf("rate %.0f without writes, want the cap", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		var tm *time.Timer
		for b.turns.acquire(ctx, nil, &tm) == nil { // as fast as the budget allows: 10,000/s, busy
			b.turns.release()
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for probes()-p0 < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes in 60s of busy writes", probes()-p0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBudgetIdle: without watchers the budget neither probes nor
// decides; the first watcher wakes it.
func TestBudgetIdle(t *testing.T) {
	b := NewBudget(Limits{}, nil)
	total := func() float64 {
		n := 0.0
		for _, d := range decisions {
			n += testutil.ToFloat64(b.metrics.decisions[d])
		}
		return n
	}
	runBudget(t, b)
	n0 := total()
	time.Sleep(350 * time.Millisecond)
	if n := total() - n0; n != 0 {
		t.Fatalf("%.0f decisions without watchers", n)
	}
	if b.Signal() != 0 {
		t.Fatalf("signal %v without watchers", b.Signal())
	}
	if err := b.admit(); err != nil {
		t.Fatal(err)
	}
	defer b.leave()
	deadline := time.Now().Add(60 * time.Second)
	for total()-n0 < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%.0f decisions 60s after the first watcher", total()-n0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBudgetBaseline: while writes are busy the budget, about once a
// second, pauses turns for QuietFor (no write gets one meanwhile)
// and measures the baseline then; turns resume afterwards.
func TestBudgetBaseline(t *testing.T) {
	b := NewBudget(Limits{WriteRate: 20_000, WriteConcurrency: 1}, nil)
	if err := b.admit(); err != nil {
		t.Fatal(err)
	}
	defer b.leave()
	runBudget(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		times []time.Time
	)
	wg.Add(1)
	go func() { // as many turns as the budget gives: busy
		defer wg.Done()
		var tm *time.Timer
		for b.turns.acquire(ctx, nil, &tm) == nil {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			b.turns.release()
		}
	}()
	quiet := b.ctl.QuietFor
	gaps := func() (n, turns int) {
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i < len(times); i++ {
			if times[i].Sub(times[i-1]) >= quiet*3/4 {
				n++
			}
		}
		return n, len(times)
	}
	// Quiet periods: one soon after the start, then one per second. A
	// loaded machine adds gaps of its own (a goroutine waiting for a
	// core), so the test waits for a baseline, two gaps and 1000 turns;
	// the upper bound on gaps is checked with QS_BENCH=1 only.
	start := time.Now()
	for {
		n, turns := gaps()
		if b.Baseline() > 0 && n >= 2 && turns >= 1000 && time.Since(start) >= 2500*time.Millisecond {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("60s into busy writes: baseline %v, %d gaps of %v or more, %d turns", b.Baseline(), n, quiet*3/4, turns)
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	n, turns := gaps()
	if os.Getenv("QS_BENCH") != "" && (n < 2 || n > 6) {
		t.Fatalf("%d gaps of %v or more between turns in %d turns over %v, want 2 to 6 quiet periods", n, quiet*3/4, turns, elapsed)
	}
	if got := testutil.ToFloat64(b.metrics.wakeDelayBaseline); got <= 0 {
		t.Fatalf("wake_delay_baseline_seconds %v", got)
	}
	t.Logf("%d turns, %d quiet gaps in %v, baseline %v, signal %v", turns, n, elapsed, b.Baseline(), b.Signal())
}

// schedulerBench skips a test that measures this machine's scheduler
// (how late a woken goroutine runs, with and without a hog of our own)
// unless QS_BENCH is set: another process's load changes what it
// measures. The controller's decisions on given delays are tested without
// a scheduler in control_test.go.
func schedulerBench(t *testing.T) {
	t.Helper()
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("measures the scheduler of a quiet machine: set QS_BENCH=1")
	}
}
