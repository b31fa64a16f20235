package watch

import (
	"slices"
	"time"
)

// The write budget's rate adapts to what watch delivery costs readers
// (Budget.Run): every control window the budget measures how late a
// goroutine woken by the network runs (the probe, see probe.go: what a
// reader's request waits for before it is served) and hands that
// observation to controlParams.next, which returns the next rate. The
// rule is additive increase, multiplicative decrease, between a floor and
// the configured cap (Limits.WriteRate).
//
// Delivery slows readers (over) when the window's delay exceeds either
//
//   - Target (Limits.WakeDelayTarget, 1ms): readers wait too long,
//     whoever is to blame; on an overloaded machine the budget leaves the
//     CPU to them; or
//   - the baseline by more than delivery may add: Ratio × baseline, and at
//     least baseline + Margin. The baseline is the delay while watchers
//     do not write: about once a second the budget pauses every turn for
//     QuietFor and probes meanwhile (QuietEvery, Budget.Run). On a quiet
//     machine readers are served within tens of microseconds and their
//     latency tail is tight: delivery adding a few hundred microseconds to
//     the wake-up delay already doubles the tail, long before Target.
//
// Then:
//
//   - over: cut the rate by limit/delay, within [MaxCut, MinCut] (a
//     window far over the limit cuts harder), not below the floor.
//   - within, and some write waited for the rate in the window: the
//     budget held delivery back while readers were fine. Raise the rate
//     by RaiseStep of the cap.
//   - otherwise (nothing waited for the rate) hold.
//
// Three things must not fool it. Watchers' own goroutines queuing are
// not measured as such: the probe is a goroutine woken by the network, so
// it waits only as long as a reader would. A garbage collection slows
// readers and watchers alike for a moment (with a large heap its mark
// phase delays the probe by several milliseconds): a window over the
// limit in which a GC cycle started or ended is forgiven, up to
// MaxForgiven in a row, so that a GC does not cut the rate but a process
// that collects all the time still does. Load from other processes
// delays the probe like readers: it raises the baseline too, so only
// what delivery adds counts against Ratio and Margin, while Target still
// cuts delivery on an overloaded machine, which is the right response.
//
// The budget probes only while delivery is busy (busy): at least
// BusyRate writes per second, or some waiting for the rate. Below that
// delivery costs readers little, the rate has nothing to rise for, and
// the probe would cost about as much as the writes (500 probes/s cost
// 1–1.7% of a CPU on the test machine, mostly thread wake-ups; 1,000
// writes/s to watchers cost 2–4%; BenchmarkBudgetProbe).
//
// The floor keeps every watcher moving: at least FloorPerWatcher turns
// per second per watcher (one every 2 s by default, well within what a
// prefix buffers at a hundred writes per second) and MinRate in all, so a
// watcher is never cut as too slow because the budget was throttled.
type controlParams struct {
	// Window is how often the rate is decided; ProbeEvery how often the
	// probe measures within it.
	Window     time.Duration
	ProbeEvery time.Duration
	// Quantile of the window's probe delays (and of the baseline's)
	// compared with the limit: Target, or the baseline × Ratio, at least
	// baseline + Margin.
	Quantile float64
	Target   time.Duration
	Ratio    float64
	Margin   time.Duration
	// QuietEvery and QuietFor: how often the budget pauses turns to
	// measure the baseline, and for how long (probing after QuietSettle,
	// once the last writes' work is done); QuietKeep: how many quiet
	// periods' probes make the baseline.
	QuietEvery, QuietFor, QuietSettle time.Duration
	QuietKeep                         int
	// RaiseStep is the fraction of the cap added per window.
	RaiseStep float64
	// A cut multiplies the rate by Target/delay, clamped to [MaxCut,
	// MinCut] (MaxCut < MinCut < 1: the smaller, the harder the cut).
	MinCut, MaxCut float64
	// The floor: max(MinRate, FloorPerWatcher × watchers), at most the cap.
	MinRate         float64
	FloorPerWatcher float64
	// MaxForgiven is how many windows over target in a row are forgiven
	// when a GC cycle started or ended in each.
	MaxForgiven int
	// BusyRate: at least this many writes per second (or one waiting for
	// the rate) in a window, and the budget probes during the next.
	BusyRate float64
}

// defaultControl are the controller's settings; see docs/benchmarks.md,
// Watchers, for how they were chosen.
func defaultControl() controlParams {
	return controlParams{
		Window:          100 * time.Millisecond,
		ProbeEvery:      2 * time.Millisecond,
		Quantile:        0.9,
		Target:          time.Millisecond, // Limits.WakeDelayTarget
		Ratio:           2,
		Margin:          200 * time.Microsecond,
		QuietEvery:      time.Second,
		QuietFor:        20 * time.Millisecond,
		QuietSettle:     6 * time.Millisecond,
		QuietKeep:       8,
		RaiseStep:       1.0 / 50,
		MinCut:          0.8,
		MaxCut:          0.5,
		MinRate:         100,
		FloorPerWatcher: 0.5,
		MaxForgiven:     2, // a cycle's start and end may fall in two windows
		BusyRate:        1000,
	}
}

// observation is what the budget saw during one control window.
type observation struct {
	// Delay is the Quantile of the probe's delays in the window, a probe
	// still outstanding at the window's end counting with its age so far.
	// Samples is how many there were (0: no signal).
	Delay   time.Duration
	Samples int
	// Baseline is the Quantile of the probe's delays in the last quiet
	// periods, while no watcher wrote (0: not measured yet).
	Baseline time.Duration
	// GC: a garbage collection cycle started or ended during the window.
	GC bool
	// Limited: some write turn waited for the rate. Turns: how many were
	// taken.
	Limited bool
	Turns   int
	// Watchers subscribed at the window's end (for the floor).
	Watchers int
}

// decision is what the controller did with a window, the label of
// rate_decisions_total.
type decision string

const (
	decideRaise    decision = "raise"
	decideCut      decision = "cut"
	decideHold     decision = "hold"
	decideForgiven decision = "gc_forgiven" // over target, but a GC cycle started or ended in the window
	decideNoSignal decision = "no_signal"   // no probe came back: not probing (delivery not busy), or none sent yet
)

var decisions = []decision{decideRaise, decideCut, decideHold, decideForgiven, decideNoSignal}

// controlState is the controller's state between windows.
type controlState struct {
	Rate     float64 // turns per second
	forgiven int     // windows over target forgiven in a row (GC)
}

// floor returns the lowest rate for watchers, at most ceiling.
func (p controlParams) floor(watchers int, ceiling float64) float64 {
	return min(ceiling, max(p.MinRate, p.FloorPerWatcher*float64(watchers)))
}

// busy tells whether delivery was busy enough in window o to probe during
// the next one.
func (p controlParams) busy(o observation) bool {
	return o.Limited || float64(o.Turns) >= p.BusyRate*p.Window.Seconds()
}

// limit returns the delay above which delivery slows readers, given the
// baseline (0: unknown, Target alone).
func (p controlParams) limit(baseline time.Duration) time.Duration {
	if baseline <= 0 {
		return p.Target
	}
	return min(p.Target, max(time.Duration(p.Ratio*float64(baseline)), baseline+p.Margin))
}

// next returns the state after window o, the rate within [floor, ceiling].
func (p controlParams) next(s controlState, o observation, ceiling float64) (controlState, decision) {
	lo := p.floor(o.Watchers, ceiling)
	clamp := func(r float64) float64 { return min(ceiling, max(lo, r)) }
	if o.Samples == 0 {
		return controlState{Rate: clamp(s.Rate), forgiven: s.forgiven}, decideNoSignal
	}
	if limit := p.limit(o.Baseline); o.Delay > limit {
		if o.GC && s.forgiven < p.MaxForgiven {
			return controlState{Rate: clamp(s.Rate), forgiven: s.forgiven + 1}, decideForgiven
		}
		f := min(p.MinCut, max(p.MaxCut, float64(limit)/float64(o.Delay)))
		return controlState{Rate: clamp(s.Rate * f)}, decideCut
	}
	if o.Limited && s.Rate < ceiling {
		return controlState{Rate: clamp(s.Rate + p.RaiseStep*ceiling)}, decideRaise
	}
	return controlState{Rate: clamp(s.Rate)}, decideHold
}

// quantile returns the q-quantile of ds (sorted in place), 0 if empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(len(ds)-1, max(0, i))]
}
