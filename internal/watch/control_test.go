package watch

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestControlScript replays testdata/control.txt: each observation gives
// the decision and the rate the controller must return.
func TestControlScript(t *testing.T) {
	f, err := os.Open("testdata/control.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := defaultControl()
	var (
		s       controlState
		ceiling float64
		steps   int
	)
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("control.txt:%d: %s: %s", line, text, fmt.Sprintf(format, args...))
		}
		if strings.HasPrefix(text, "cap ") {
			if _, err := fmt.Sscanf(text, "cap %g rate %g", &ceiling, &s.Rate); err != nil {
				fail("%v", err)
			}
			s.forgiven = 0
			continue
		}
		obsText, wantText, ok := strings.Cut(text, "->")
		if !ok {
			fail("want an observation -> decision rate")
		}
		var o observation
		for _, w := range strings.Fields(obsText) {
			k, v, _ := strings.Cut(w, "=")
			var err error
			switch k {
			case "delay":
				o.Delay, err = time.ParseDuration(v)
			case "samples":
				o.Samples, err = strconv.Atoi(v)
			case "watchers":
				o.Watchers, err = strconv.Atoi(v)
			case "baseline":
				o.Baseline, err = time.ParseDuration(v)
			case "limited":
				o.Limited = true
			case "gc":
				o.GC = true
			default:
				err = fmt.Errorf("unknown field %q", k)
			}
			if err != nil {
				fail("%v", err)
			}
		}
		want := strings.Fields(wantText)
		if len(want) < 2 {
			fail("want a decision and a rate")
		}
		wantRate, err := strconv.ParseFloat(want[1], 64)
		if err != nil {
			fail("%v", err)
		}
		var d decision
		s, d = p.next(s, o, ceiling)
		if string(d) != want[0] || math.Abs(s.Rate-wantRate) > 1e-9 {
			fail("got %s %g", d, s.Rate)
		}
		for _, w := range want[2:] {
			if v, ok := strings.CutPrefix(w, "forgiven="); ok {
				if n, _ := strconv.Atoi(v); s.forgiven != n {
					fail("forgiven %d, want %d", s.forgiven, n)
				}
			}
		}
		steps++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if steps < 30 {
		t.Fatalf("only %d steps replayed", steps)
	}
}

// TestControlBounds: whatever it observes, the controller keeps the rate
// within [floor, cap], cuts only over target, raises only within it when
// limited, and cuts a window over target without a GC.
func TestControlBounds(t *testing.T) {
	p := defaultControl()
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		ceiling := float64(100 + r.IntN(100_000))
		s := controlState{Rate: ceiling * r.Float64()}
		for range 500 {
			o := observation{
				Delay:    time.Duration(r.ExpFloat64() * float64(p.Target)),
				Samples:  r.IntN(60),
				GC:       r.IntN(4) == 0,
				Limited:  r.IntN(2) == 0,
				Watchers: r.IntN(20_000),
			}
			if r.IntN(2) == 0 {
				o.Baseline = time.Duration(r.ExpFloat64() * float64(p.Target) / 4)
			}
			prev := s
			var d decision
			s, d = p.next(s, o, ceiling)
			lo := p.floor(o.Watchers, ceiling)
			if s.Rate < lo || s.Rate > ceiling {
				t.Fatalf("run %d: rate %g outside [%g, %g] after %+v", run, s.Rate, lo, ceiling, o)
			}
			limit := p.limit(o.Baseline)
			if limit > p.Target || limit < min(p.Target, o.Baseline+p.Margin) {
				t.Fatalf("limit %v with baseline %v", limit, o.Baseline)
			}
			over := o.Samples > 0 && o.Delay > limit
			switch {
			case d == decideCut && !over, d == decideRaise && (over || !o.Limited):
				t.Fatalf("run %d: %s on %+v", run, d, o)
			case d == decideCut && s.Rate > max(lo, prev.Rate*p.MinCut)+1e-9:
				t.Fatalf("run %d: cut from %g to %g", run, prev.Rate, s.Rate)
			case over && !o.GC && d != decideCut:
				t.Fatalf("run %d: %s on %+v (no GC, over target)", run, d, o)
			}
		}
	}
}

func TestQuantile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	for _, c := range []struct {
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.9, 0},
		{ms(5), 0.9, 5 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.9, 9 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.5, 5 * time.Millisecond},
		{ms(1, 2), 0.9, 2 * time.Millisecond},
	} {
		if got := quantile(c.ds, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.ds, c.q, got, c.want)
		}
	}
}

// TestControlBusy: the budget probes after a window with at least
// BusyRate (1,000) writes per second, or one in which a write waited for
// the rate.
func TestControlBusy(t *testing.T) {
	p := defaultControl()
	for _, c := range []struct {
		o    observation
		want bool
	}{
		{observation{}, false},
		{observation{Turns: 99}, false}, // 990/s
		{observation{Turns: 100}, true}, // 1,000/s
		{observation{Limited: true, Turns: 1}, true},
		{observation{Turns: 5000, Delay: time.Second, Samples: 50}, true},
	} {
		if got := p.busy(c.o); got != c.want {
			t.Errorf("busy(%+v) = %v, want %v", c.o, got, c.want)
		}
	}
}
