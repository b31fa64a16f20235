package watch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// turns is the write budget of watch streams (see Limits). A watcher
// writes only during a turn: at most Limits.WriteConcurrency turns at
// once, and at most Limits.WriteRate turns per second (WriteBurst at once). A watcher
// that waits for its turn writes everything that arrived meanwhile when
// it gets it, so a storm (many watchers, many changes) costs delivery
// delay, about watchers / WriteRate seconds, and never more than the
// budget's CPU.
//
// Why turns and not just a rate: the Go scheduler runs a goroutine woken
// by another goroutine or a timer before the goroutines woken by the
// network, and polls the network mostly when a P has nothing else to run.
// Thousands of watchers each woken when their turn comes would keep every
// P busy and leave readers waiting in the queue for milliseconds; with one
// turn at a time, delivery occupies at most WriteConcurrency Ps and the
// others stay free for readers.
//
// The rate is paced in steps of up to maxTurnsPerStep turns (at most the
// burst): a token of the limiter buys a step, so that a saturated budget
// sleeps once per step, not once per turn (each sleep parks a goroutine
// and often a thread; see BenchmarkTurns).
//
// The rate changes while turns are taken (setRate, by the budget's
// controller); limited counts the turns that waited for it, the
// controller's sign that the rate held delivery back, and taken all of
// them.
type turns struct {
	slots   chan struct{} // one element per turn under way
	lim     *rate.Limiter // one token per step
	step    int           // turns per token
	limited atomic.Int64  // turns that waited for the rate
	taken   atomic.Int64  // turns taken

	mu      sync.Mutex
	credits int // turns bought and not yet taken

	// paused, while not nil, is closed when turns resume (pause): a
	// watcher that gets a slot meanwhile waits for it, holding the slot,
	// so that the others stay queued for slots without waking.
	paused atomic.Pointer[chan struct{}]

	waitSeconds prometheus.Observer // turn_wait_seconds
	waiting     prometheus.Gauge    // turn_waiting
}

const maxTurnsPerStep = 8

func newTurns(concurrency int, perSecond float64, burst int, m *Metrics) *turns {
	step := min(maxTurnsPerStep, burst)
	return &turns{
		slots:       make(chan struct{}, concurrency),
		lim:         rate.NewLimiter(rate.Limit(perSecond/float64(step)), burst/step),
		step:        step,
		waitSeconds: m.turnWait,
		waiting:     m.turnWaiting,
	}
}

// setRate sets the rate to perSecond turns per second.
func (ts *turns) setRate(perSecond float64) {
	ts.lim.SetLimit(rate.Limit(perSecond / float64(ts.step)))
}

// rate returns the rate in turns per second.
func (ts *turns) rate() float64 { return float64(ts.lim.Limit()) * float64(ts.step) }

// credit takes one bought turn, or buys a step of them if the limiter
// allows it now; false: the caller must wait for the limiter.
func (ts *turns) credit() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.credits == 0 {
		if !ts.lim.Allow() {
			return false
		}
		ts.credits = ts.step
	}
	ts.credits--
	return true
}

// bought adds the turns of a token the caller waited for, taking one.
func (ts *turns) bought() {
	ts.mu.Lock()
	ts.credits += ts.step - 1
	ts.mu.Unlock()
}

// acquire waits for a turn, then for the rate, and returns holding the
// turn; or fails with ctx's error, or ErrClosed when done is closed
// first. t is the caller's timer, reused between calls (created when nil).
func (ts *turns) acquire(ctx context.Context, done <-chan struct{}, t **time.Timer) error {
	var start time.Time
	select {
	case ts.slots <- struct{}{}:
	default:
		start = time.Now()
		ts.waiting.Inc()
		select {
		case ts.slots <- struct{}{}:
			ts.waiting.Dec()
		case <-ctx.Done():
			ts.waiting.Dec()
			return ctx.Err()
		case <-done:
			ts.waiting.Dec()
			return ErrClosed
		}
	}
	if p := ts.paused.Load(); p != nil {
		if start.IsZero() {
			start = time.Now()
		}
		select {
		case <-*p:
		case <-ctx.Done():
			ts.release()
			return ctx.Err()
		case <-done:
			ts.release()
			return ErrClosed
		}
	}
	if ts.credit() { // the usual case, without Reserve's allocation
		ts.taken.Add(1)
		if start.IsZero() {
			ts.waitSeconds.Observe(0)
		} else {
			ts.waitSeconds.Observe(time.Since(start).Seconds())
		}
		return nil
	}
	r := ts.lim.Reserve() // burst >= 1: always possible
	if d := r.Delay(); d > 0 {
		ts.limited.Add(1)
		if start.IsZero() {
			start = time.Now()
		}
		if *t == nil {
			*t = time.NewTimer(d)
		} else {
			(*t).Reset(d)
		}
		select {
		case <-(*t).C:
		case <-ctx.Done():
			(*t).Stop()
			r.Cancel()
			ts.release()
			return ctx.Err()
		case <-done:
			(*t).Stop()
			r.Cancel()
			ts.release()
			return ErrClosed
		}
	}
	ts.bought()
	ts.taken.Add(1)
	if start.IsZero() {
		ts.waitSeconds.Observe(0)
	} else {
		ts.waitSeconds.Observe(time.Since(start).Seconds())
	}
	return nil
}

func (ts *turns) release() { <-ts.slots }

// pause stops new turns from starting until resume; turns under way go
// on until they end.
func (ts *turns) pause() {
	ch := make(chan struct{})
	if !ts.paused.CompareAndSwap(nil, &ch) {
		return // already paused
	}
}

// resume lets turns start again.
func (ts *turns) resume() {
	if p := ts.paused.Swap(nil); p != nil {
		close(*p)
	}
}
