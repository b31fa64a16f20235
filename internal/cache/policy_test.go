package cache

import (
	"fmt"
	"testing"
	"time"
)

func TestClockGivesATouchedKeyOneSecondChance(t *testing.T) {
	c := NewClock()
	k := []byte("key")
	if c.SecondChance(k) {
		t.Fatal("an untouched key had its reference bit set")
	}
	c.Touch(k)
	c.Touch(k)
	if !c.SecondChance(k) {
		t.Fatal("a touched key got no second chance")
	}
	if c.SecondChance(k) {
		t.Fatal("the hand's pass did not clear the reference bit")
	}
}

func TestLimitsNeed(t *testing.T) {
	l := Limits{Budget: 1000, SoftFree: 100, HardFree: 50}
	for _, tc := range []struct {
		cached    int64
		soft      bool
		sinceSoft time.Duration
		need      int64
		step      bool
	}{
		{cached: 900, need: -100},
		{cached: 1500, need: 500},
		{cached: 900, soft: true, sinceSoft: SoftEvictEvery, need: 91, step: true},
		{cached: 900, soft: true, sinceSoft: SoftEvictEvery / 2, need: -100},
		{cached: 5000, soft: true, sinceSoft: SoftEvictEvery, need: 4000, step: true},
	} {
		need, step := l.Need(tc.cached, tc.soft, tc.sinceSoft)
		if need != tc.need || step != tc.step {
			t.Errorf("Need(%d, %v, %v) = %d, %v; want %d, %v", tc.cached, tc.soft, tc.sinceSoft, need, step, tc.need, tc.step)
		}
	}
	if got := (Limits{Budget: -1}).Bytes(); got != 0 {
		t.Errorf("a negative budget counts as %d bytes, want 0", got)
	}
	// No budget (zero or negative): everything outside the window goes;
	// an empty cache needs nothing, unless the disk is short of space
	// (then the keeper looks, and finds nothing to give up).
	for _, tc := range []struct {
		l      Limits
		cached int64
		soft   bool
		need   int64
		step   bool
		over   bool
	}{
		{l: Limits{Budget: 0}, cached: 500, need: 500, over: true},
		{l: Limits{Budget: -1}, cached: 500, need: 500, over: true},
		{l: Limits{Budget: -1}, cached: 0, need: 0},
		{l: Limits{Budget: 1000}, cached: 0, need: -1000},
		{l: Limits{Budget: 1000}, cached: 1000, need: 0},
		{l: Limits{Budget: 1000}, cached: 1001, need: 1, over: true},
		{l: Limits{Budget: 1000}, cached: 0, soft: true, need: 1, step: true},
		{l: Limits{Budget: 0}, cached: 0, soft: true, need: 1, step: true},
	} {
		need, step := tc.l.Need(tc.cached, tc.soft, SoftEvictEvery)
		if need != tc.need || step != tc.step || tc.l.Over(tc.cached) != tc.over {
			t.Errorf("budget %d, cached %d, soft %v: need %d, step %v, over %v; want %d, %v, %v",
				tc.l.Budget, tc.cached, tc.soft, need, step, tc.l.Over(tc.cached), tc.need, tc.step, tc.over)
		}
	}
	for _, tc := range []struct {
		avail      uint64
		soft, hard bool
	}{{200, false, false}, {100, false, false}, {99, true, false}, {50, true, false}, {49, true, true}, {0, true, true}} {
		if soft, hard := l.Disk(tc.avail); soft != tc.soft || hard != tc.hard {
			t.Errorf("Disk(%d) = %v, %v; want %v, %v", tc.avail, soft, hard, tc.soft, tc.hard)
		}
	}
	// No free-space limits: never limited, even on a full disk.
	if soft, hard := (Limits{}).Disk(0); soft || hard {
		t.Errorf("zero limits on a full disk: soft %v, hard %v", soft, hard)
	}
}

func TestPacerIdlesWhileTurnsFindNothing(t *testing.T) {
	tick := 100 * time.Millisecond
	p := NewPacer(tick)
	now := time.Unix(1000, 0)
	if p.Idle(now, 5) || p.Rounds(8) != 8 {
		t.Fatal("a fresh pacer idles")
	}
	var idles []time.Duration
	for range 6 {
		p.Cycled(now, 5)
		idles = append(idles, p.IdleFor())
	}
	want := []time.Duration{tick, 2 * tick, 4 * tick, 8 * tick, MaxIdle, MaxIdle}
	if fmt.Sprint(idles) != fmt.Sprint(want) {
		t.Fatalf("idle times %v, want %v", idles, want)
	}
	if !p.Idle(now, 5) || p.Rounds(8) != 1 {
		t.Fatal("an idling pacer does not idle, or sweeps whole turns")
	}
	if p.Idle(now, 6) {
		t.Fatal("the pacer idles although the window moved")
	}
	if p.Idle(now.Add(MaxIdle), 5) {
		t.Fatal("the pacer idles past its idle time")
	}
	p.Found()
	p.Cycled(now, 5)
	if p.IdleFor() != 0 || p.Rounds(8) != 8 {
		t.Fatal("a turn that found values did not end the idling")
	}
}

func TestQueueNeverBlocksAndDrainsInBatches(t *testing.T) {
	q := NewQueue[int](3)
	for i := range 3 {
		if !q.Offer(i) {
			t.Fatalf("offer %d refused below the capacity", i)
		}
	}
	if q.Offer(3) {
		t.Fatal("a full queue took an item")
	}
	select {
	case <-q.Woken():
	default:
		t.Fatal("offers did not wake the drainer")
	}
	got := q.Drain(nil, 2)
	if fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("drained %v, want [0 1]", got)
	}
	select {
	case <-q.Woken():
	default:
		t.Fatal("a drain that left items did not wake the drainer again")
	}
	if got = q.Drain(got[:0], 10); fmt.Sprint(got) != "[2]" || q.Len() != 0 {
		t.Fatalf("drained %v (left %d), want [2]", got, q.Len())
	}
}
