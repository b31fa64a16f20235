package watch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are what the watch streams of a process may use, all databases
// together: connections and CPU are the process's. A zero field means its
// default; EnsureDefaults fills them and Validate rejects the rest.
type Limits struct {
	// MaxWatchers is the most watch subscriptions served at once, catching
	// up or live; more fail with ErrTooManyWatchers. Keep it below the
	// HTTP connection cap so that watchers never take every connection
	// from readers. Default 10,000.
	MaxWatchers int
	// WriteRate, WriteBurst and WriteConcurrency are the write budget of
	// all watch streams: a stream writes (changes, progress lines) only
	// during a turn, at most WriteConcurrency under way at a time, WriteBurst
	// at once after a pause, and at most the budget's rate per second. It
	// waits for its turn and then writes everything that arrived meanwhile,
	// so a storm costs delivery delay, not CPU taken from readers.
	//
	// The rate adapts while Budget.Run runs (see control.go): it rises
	// while readers are served promptly and is cut when watch delivery
	// slows them, never above WriteRate (the cap) and never below a floor
	// that gives every watcher a turn every 2 s. Without Run it stays at
	// WriteRate. Defaults: 25,000/s per CPU (GOMAXPROCS; in effect no cap:
	// one turn at a time manages about 30,000 writes/s), 32, and one turn
	// at a time per 4 CPUs (at least one).
	WriteRate        float64
	WriteBurst       int
	WriteConcurrency int
	// WakeDelayTarget is how late, at the 90th percentile over 100ms, a
	// goroutine woken by the network (a reader's request) may run while
	// watchers are served: above it Run cuts the write rate, as it does
	// above twice the delay measured while no watcher writes (at least
	// that + 200µs; see control.go). Default 1ms.
	WakeDelayTarget time.Duration
}

// DefaultLimits returns every default.
func DefaultLimits() Limits {
	cpus := runtime.GOMAXPROCS(0)
	return Limits{
		MaxWatchers:      10_000,
		WriteRate:        25_000 * float64(cpus),
		WriteBurst:       32,
		WriteConcurrency: max(1, cpus/4),
		WakeDelayTarget:  time.Millisecond,
	}
}

// EnsureDefaults sets every zero field to its default.
func (l *Limits) EnsureDefaults() {
	d := DefaultLimits()
	if l.MaxWatchers == 0 {
		l.MaxWatchers = d.MaxWatchers
	}
	if l.WriteRate == 0 {
		l.WriteRate = d.WriteRate
	}
	if l.WriteBurst == 0 {
		l.WriteBurst = d.WriteBurst
	}
	if l.WriteConcurrency == 0 {
		l.WriteConcurrency = d.WriteConcurrency
	}
	if l.WakeDelayTarget == 0 {
		l.WakeDelayTarget = d.WakeDelayTarget
	}
}

// Validate reports every field the budget cannot work with. It expects
// defaults to have been applied.
func (l *Limits) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("watch limits: "+format, args...))
		}
	}
	check(l.MaxWatchers >= 1, "MaxWatchers %d must be at least 1", l.MaxWatchers)
	check(l.WriteRate > 0, "WriteRate %v must be positive", l.WriteRate)
	check(l.WriteBurst >= 1, "WriteBurst %d must be at least 1", l.WriteBurst)
	check(l.WriteConcurrency >= 1, "WriteConcurrency %d must be at least 1", l.WriteConcurrency)
	check(l.WakeDelayTarget > 0, "WakeDelayTarget %v must be positive", l.WakeDelayTarget)
	return errors.Join(errs...)
}

// Budget enforces Limits for every hub sharing it (Config.Budget): the
// count of subscriptions and the write turns, whose rate Run adapts.
type Budget struct {
	limits   Limits
	metrics  *Metrics
	turns    *turns
	ctl      controlParams
	wake     chan struct{} // a first watcher arrived: Run resumes probing
	signal   atomic.Int64  // the last window's delay (Signal), nanoseconds
	baseline atomic.Int64  // the last baseline (Baseline), nanoseconds

	mu struct {
		sync.Mutex
		watchers int
	}
}

// NewBudget returns a budget of l, its rate at l.WriteRate until Run
// adapts it, counting in m (nil: a Metrics of its own). Zero fields take
// their defaults; NewBudget panics if l is invalid after that.
func NewBudget(l Limits, m *Metrics) *Budget {
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		panic(err)
	}
	if m == nil {
		m = NewMetrics()
	}
	ctl := defaultControl()
	ctl.Target = l.WakeDelayTarget
	return &Budget{
		limits:  l,
		metrics: m,
		turns:   newTurns(l.WriteConcurrency, l.WriteRate, l.WriteBurst, m),
		ctl:     ctl,
		wake:    make(chan struct{}, 1),
	}
}

// Limits returns the limits the budget enforces (defaults filled in).
func (b *Budget) Limits() Limits { return b.limits }

// Rate returns the write turns per second the budget allows now.
func (b *Budget) Rate() float64 { return b.turns.rate() }

// Signal returns what Run measured in its last window with a probe: the
// 90th percentile of how late goroutines woken by the network ran (0
// before the first).
func (b *Budget) Signal() time.Duration { return time.Duration(b.signal.Load()) }

// Baseline returns the same while no watcher wrote, over Run's last quiet
// periods (0 before the first).
func (b *Budget) Baseline() time.Duration { return time.Duration(b.baseline.Load()) }

// admit counts one more subscription, or fails with ErrTooManyWatchers.
func (b *Budget) admit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.watchers >= b.limits.MaxWatchers {
		b.metrics.refused.Inc()
		return fmt.Errorf("%w (limit %d)", ErrTooManyWatchers, b.limits.MaxWatchers)
	}
	if b.mu.watchers++; b.mu.watchers == 1 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// leave counts one subscription less.
func (b *Budget) leave() {
	b.mu.Lock()
	b.mu.watchers--
	b.mu.Unlock()
}

func (b *Budget) watchers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.watchers
}

// Run adapts the rate to what watch delivery costs readers until ctx is
// done: every control window (100ms) it measures how late goroutines
// woken by the network run (the probe) and sets the rate the controller
// decides (controlParams.next); about once a second it pauses turns for
// 20ms to measure the same while no watcher writes (the baseline).
// It probes only while delivery is busy (controlParams.busy), and does
// nothing while there are no watchers. One Run per budget; it returns nil
// when ctx is done, or an error if it cannot start the probe (the rate
// then stays at WriteRate).
func (b *Budget) Run(ctx context.Context) error {
	p, err := newProbe(b.metrics.wakeDelay)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.readLoop()
	}()
	defer func() {
		p.close()
		wg.Wait()
	}()
	r := &budgetRun{b: b, p: p, c: b.ctl, gc: newGCPauses(), state: controlState{Rate: b.turns.rate()}}
	b.metrics.writeRate.Set(r.state.Rate)
	return r.loop(ctx)
}

// budgetRun is the state of Budget.Run, owned by its goroutine.
type budgetRun struct {
	b     *Budget
	p     *probe
	c     controlParams
	gc    *gcPauses
	state controlState

	tick      *time.Ticker
	probing   bool            // delivery was busy in the last window (controlParams.busy)
	windowEnd time.Time       // of the current control window
	window    []time.Duration // its probes so far

	// A quiet period: turns paused from quietStart to quietEnd (zero
	// when none is under way); probes count after settled.
	quietStart, quietEnd, nextQuiet time.Time
	settled                         bool
	quiet                           [][]time.Duration // probes of the last QuietKeep periods
}

func (r *budgetRun) loop(ctx context.Context) error {
	c := r.c
	r.tick = time.NewTicker(c.ProbeEvery)
	defer r.tick.Stop()
	defer r.endQuiet(time.Now(), false)
	r.start(time.Now())
	for {
		if r.b.watchers() == 0 { // nothing to deliver: no probe, no decision
			r.endQuiet(time.Now(), false)
			r.tick.Stop()
			select {
			case <-r.b.wake:
			case <-ctx.Done():
				return nil
			}
			r.start(time.Now())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.tick.C:
		}
		// Not the tick's time: the timer fires late by up to a
		// millisecond, which the probe must not count.
		now := time.Now()
		switch {
		case !r.quietEnd.IsZero() && !now.Before(r.quietEnd):
			r.endQuiet(now, true)
		case !r.quietEnd.IsZero():
			if !r.settled && now.Sub(r.quietStart) >= c.QuietSettle {
				r.p.take(nil, now, time.Hour) // what came back while the last writes' work finished
				r.settled = true
			}
			if r.settled {
				r.p.send(now)
			}
			continue // the window's decision waits for the period's end
		case r.probing && !now.Before(r.nextQuiet) && now.Before(r.windowEnd):
			r.window = r.p.take(r.window, now, c.ProbeEvery)
			r.startQuiet(now)
			continue
		}
		if r.probing && now.Before(r.windowEnd) {
			r.p.send(now)
			continue
		}
		r.decide(now) // not probing, the ticker ticks once per window
		if r.probing {
			r.p.send(now)
		}
	}
}

// start begins probing (watchers came, or Run started).
func (r *budgetRun) start(now time.Time) {
	r.window = r.p.take(r.window[:0], now, time.Hour)[:0]
	r.b.turns.limited.Store(0)
	r.b.turns.taken.Store(0)
	r.gc.seen()
	r.probing = true
	r.tick.Reset(r.c.ProbeEvery)
	r.windowEnd = now.Add(r.c.Window)
	r.nextQuiet = now.Add(r.c.Window) // a baseline soon
}

// decide ends a control window: the controller's next rate.
func (r *budgetRun) decide(now time.Time) {
	c, b := r.c, r.b
	r.windowEnd = now.Add(c.Window)
	r.window = r.p.take(r.window, now, c.ProbeEvery)
	o := observation{
		Samples:  len(r.window),
		Delay:    quantile(r.window, c.Quantile),
		Baseline: r.baseline(),
		GC:       r.gc.seen(),
		Limited:  b.turns.limited.Swap(0) > 0,
		Turns:    int(b.turns.taken.Swap(0)),
		Watchers: b.watchers(),
	}
	r.window = r.window[:0]
	var d decision
	r.state, d = c.next(r.state, o, b.limits.WriteRate)
	b.turns.setRate(r.state.Rate)
	b.metrics.writeRate.Set(r.state.Rate)
	b.metrics.writeRateFloor.Set(c.floor(o.Watchers, b.limits.WriteRate))
	if o.Samples > 0 {
		b.signal.Store(int64(o.Delay))
		b.metrics.wakeDelaySignal.Set(o.Delay.Seconds())
	}
	b.metrics.decisions[d].Inc()
	if busy := c.busy(o); busy != r.probing {
		r.probing = busy
		if busy {
			r.tick.Reset(c.ProbeEvery)
			r.nextQuiet = now.Add(c.Window)
		} else {
			r.tick.Reset(c.Window)
		}
	}
}

// startQuiet pauses turns for QuietFor to measure the baseline: no new
// turn starts meanwhile, and those under way end within their lease,
// before QuietSettle.
func (r *budgetRun) startQuiet(now time.Time) {
	r.b.turns.pause()
	r.quietStart = now
	r.quietEnd = now.Add(r.c.QuietFor)
	r.settled = false
}

// endQuiet resumes turns and, if measured, keeps the period's probes for
// the baseline.
func (r *budgetRun) endQuiet(now time.Time, measured bool) {
	r.b.turns.resume()
	if r.quietEnd.IsZero() {
		return
	}
	r.quietEnd = time.Time{}
	r.nextQuiet = now.Add(r.c.QuietEvery)
	if !measured || !r.settled {
		return
	}
	q := r.p.take(nil, now, r.c.ProbeEvery)
	if len(r.quiet) == r.c.QuietKeep {
		r.quiet = append(r.quiet[:0], r.quiet[1:]...)
	}
	r.quiet = append(r.quiet, q)
	if base := r.baseline(); base > 0 {
		r.b.baseline.Store(int64(base))
		r.b.metrics.wakeDelayBaseline.Set(base.Seconds())
	}
}

// minBaselineSamples: fewer quiet probes than this, and the baseline is
// unknown.
const minBaselineSamples = 10

// baseline returns the Quantile of the probes of the last quiet periods,
// 0 if there are too few.
func (r *budgetRun) baseline() time.Duration {
	var all []time.Duration
	for _, q := range r.quiet {
		all = append(all, q...)
	}
	if len(all) < minBaselineSamples {
		return 0
	}
	return quantile(all, r.c.Quantile)
}

// gcPauses tells whether a garbage collection cycle started or ended
// since it last looked: each does so with a stop-the-world pause.
// (/gc/cycles counts ended cycles only, so it misses the first of two
// windows a cycle spans.)
type gcPauses struct {
	s    []metrics.Sample
	last uint64
}

func newGCPauses() *gcPauses {
	g := &gcPauses{s: []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}}}
	g.seen()
	return g
}

func (g *gcPauses) seen() bool {
	metrics.Read(g.s)
	if g.s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return false
	}
	var n uint64
	for _, c := range g.s[0].Value.Float64Histogram().Counts {
		n += c
	}
	seen := n != g.last
	g.last = n
	return seen
}
