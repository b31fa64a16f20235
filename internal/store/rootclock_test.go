package store

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestRootClockStamp(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second)
	const t0 = int64(1_700_000_000) * sec
	day := 24 * 3600 * sec
	var rc rootClock
	step := func(name string, wall int64, elapsed time.Duration, last, want int64, wantClamped bool) {
		t.Helper()
		if got, c := rc.stamp(wall, elapsed, last); got != want || c != wantClamped {
			t.Errorf("%s: %d %v, want %d %v", name, got, c, want, wantClamped)
		}
	}
	step("the first stamp after an entry is bounded from its time", t0+day, 5*time.Second, t0, t0, true)
	step("then by the real time since", t0+day, 21*time.Second, t0, t0+16*sec+sec, true)
	rc = rootClock{}
	rc.learn(t0, time.Second)
	step("learned at open: the real time since counts", t0+10*sec+maxProposedClockStep, 11*time.Second, t0, t0+10*sec+maxProposedClockStep, false)
	rc = rootClock{}
	step("an empty log takes the wall clock", t0, 0, 0, t0, false)
	step("time passing", t0+sec, time.Second, t0, t0+sec, false)
	step("within the step ahead of real time", t0+2*sec+maxProposedClockStep, 2*time.Second, t0+sec, t0+2*sec+maxProposedClockStep, false)
	// The anchor moved to the last reading: t0+2s+step at elapsed 2s.
	base := t0 + 2*sec + maxProposedClockStep
	step("a jump of a day: real time elapsed, and a sixteenth", base+day, 18*time.Second, base, base+16*sec+sec, true)
	step("still ahead: the anchor keeps real time", base+day+sec, 34*time.Second, base+17*sec, base+34*sec, true)
	step("the clock set back: the log never goes back", t0, 35*time.Second, base+34*sec, base+34*sec, false)
	step("time passes after the set-back", t0+6*sec, 41*time.Second, base+34*sec, base+34*sec, false)
	step("the clock set right again: taken", base+41*sec, 42*time.Second, base+34*sec, base+41*sec, false)
	step("elapsed going back counts as none", t0+day, 30*time.Second, base+41*sec, base+41*sec, true)
	rc = rootClock{}
	step("a member's first proposal, its log behind", t0+day, 0, t0, t0, true)
	step("others dated the log since: bounded from the log's time", t0+day+sec, time.Second, t0+day, t0+day, true)
	step("then the wall clock in step is taken", t0+day+2*sec, 2*time.Second, t0+day, t0+day+2*sec, false)
}

// fakeClocks is a wall clock and a real-time (monotonic) clock a test
// moves apart: a jump of the wall clock moves only the first.
type fakeClocks struct{ wall, elapsed atomic.Int64 }

func (f *fakeClocks) now() time.Time            { return time.Unix(0, f.wall.Load()) }
func (f *fakeClocks) since() time.Duration      { return time.Duration(f.elapsed.Load()) }
func (f *fakeClocks) pass(d time.Duration)      { f.wall.Add(int64(d)); f.elapsed.Add(int64(d)) }
func (f *fakeClocks) jump(d time.Duration)      { f.wall.Add(int64(d)) }
func (f *fakeClocks) options(o Options) Options { o.Now, o.Elapsed = f.now, f.since; return o }

// A root whose wall clock jumps a day ahead keeps dating its entries by
// real time: a write retried with its batch ID is answered from its
// outcome, not applied again over a newer value, and history within the
// retention stays, while outcomes and versions older than the window (by
// real time) still expire.
func TestRootClockJumpExpiresNothingEarly(t *testing.T) {
	t.Parallel()
	clocks := &fakeClocks{}
	clocks.wall.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	const window = 2 * time.Hour
	s := openTest(t, clocks.options(Options{Name: "root-clock-jump", IdempotencyWindow: window,
		History: HistoryOptions{Retention: window}, Logger: quietLogger()}))
	clamped := s.Metrics().EntryTimeClamped

	// Older than the window once 2.5 h of real time have passed.
	if _, err := writeID(t, s, "old", nil, set("g", "1")); err != nil {
		t.Fatal(err)
	}
	gone := mustWrite(t, s, set("g", "2")).Index
	clocks.pass(90 * time.Minute)
	first, err := writeID(t, s, "retried", nil, set("k", "first"))
	if err != nil {
		t.Fatal(err)
	}
	newer := mustWrite(t, s, set("k", "newer")).Index

	clocks.jump(24 * time.Hour)
	clocks.pass(time.Hour)
	r, err := writeID(t, s, "retried", nil, set("k", "first"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Duplicate || r.Index != first.Index {
		t.Fatalf("retry after the clock jumped a day: %+v, want the outcome of index %d", r, first.Index)
	}
	if v, idx, _ := get(t, s, "k"); v != "newer" || idx != newer {
		t.Fatalf("k = %q at %d after the retry, want the newer value at %d", v, idx, newer)
	}
	if ahead := s.AppliedTime().Sub(time.Unix(0, clocks.wall.Load())); ahead > -23*time.Hour {
		t.Fatalf("log clock %v from the jumped wall clock: the jump moved it", ahead)
	}
	if got := s.Metrics().EntryTimeClamped; got <= clamped {
		t.Errorf("bounded stamps not counted: %v -> %v", clamped, got)
	}

	// Expiry passes run at most once a second of real time: write until
	// the outcome and the version older than the window are gone, which
	// shows a pass ran after the jump.
	deadline := time.Now().Add(60 * time.Second)
	for countPrefix(t, s, prefixBatchID) != 1 || mustHistory(t, s).Horizon < gone {
		if time.Now().After(deadline) {
			t.Fatalf("outcomes %d, history horizon %d: older than the window, not expired", countPrefix(t, s, prefixBatchID), mustHistory(t, s).Horizon)
		}
		mustWrite(t, s, set("tick", time.Now().String()))
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := writeID(t, s, "retried", nil, set("k", "first")); err != nil || !r.Duplicate {
		t.Fatalf("retry after the expiry passes: %+v %v", r, err)
	}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if val, _, found, err := v.GetAt([]byte("k"), newer-1); err != nil || !found || string(val) != "first" {
		t.Fatalf("k as of %d after the jump: %q %v %v, want the first value kept by history", newer-1, val, found, err)
	}
	if _, _, _, err := v.GetAt([]byte("g"), gone-1); !errors.Is(err, ErrHistoryTruncated) {
		t.Fatalf("g as of %d, older than the retention: %v, want it expired", gone-1, err)
	}
	mustVerify(t, s)
}

func mustHistory(t *testing.T, s *Store) History {
	t.Helper()
	h, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A root restarted with its wall clock a day ahead dates its first entry
// at most the step past the last entry's time plus the real time since
// it opened, not a day ahead: a retried write is still answered from its
// outcome.
func TestRootClockAheadAtRestart(t *testing.T) {
	clocks := &fakeClocks{}
	clocks.wall.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	dir := t.TempDir()
	o := clocks.options(Options{Name: "root-clock-restart", Dir: dir, IdempotencyWindow: time.Hour, Logger: quietLogger()})
	s := openTest(t, o)
	first, err := writeID(t, s, "retried", nil, set("k", "first"))
	if err != nil {
		t.Fatal(err)
	}
	newer := mustWrite(t, s, set("k", "newer")).Index
	last := s.AppliedTime().UnixNano()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	clocks.jump(24 * time.Hour)
	s = openTest(t, o)
	clamped := s.Metrics().EntryTimeClamped
	clocks.pass(10 * time.Second)
	at := mustWrite(t, s, set("other", "x"))
	got := s.AppliedTime().UnixNano()
	if limit := last + int64(10*time.Second) + int64(10*time.Second)/16 + maxProposedClockStep; got > limit {
		t.Fatalf("first entry %d after a restart with the clock a day ahead dated %v past the last, want at most %v",
			at.Index, time.Duration(got-last), time.Duration(limit-last))
	}
	if c := s.Metrics().EntryTimeClamped; c <= clamped {
		t.Errorf("bounded stamp not counted: %v -> %v", clamped, c)
	}
	r, err := writeID(t, s, "retried", nil, set("k", "first"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Duplicate || r.Index != first.Index {
		t.Fatalf("retry after the restart: %+v, want the outcome of index %d", r, first.Index)
	}
	if v, idx, _ := get(t, s, "k"); v != "newer" || idx != newer {
		t.Fatalf("k = %q at %d after the retry, want the newer value at %d", v, idx, newer)
	}
}

// An HA root member dates its proposals from the log's time and the real
// time it measured since, not from a wall clock far ahead (a new leader's
// first heartbeat, a member's write); a wall clock in step is taken as it
// is.
func TestProposalTimeBounded(t *testing.T) {
	const sec = int64(time.Second)
	clocks := &fakeClocks{}
	clocks.wall.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := openTest(t, clocks.options(Options{Name: "proposal-clock", Logger: quietLogger()}))
	mustWrite(t, s, set("k", "v"))
	last := s.AppliedTime().UnixNano()
	clamped := s.Metrics().EntryTimeClamped

	day := 24 * time.Hour
	if got := s.ProposalTime(time.Unix(0, last).Add(day), time.Minute); got != last {
		t.Fatalf("first proposal with the wall clock a day ahead: %v past the log, want 0", time.Duration(got-last))
	}
	if got := s.ProposalTime(time.Unix(0, last).Add(day), time.Minute+16*time.Second); got != last+17*sec {
		t.Fatalf("16 s later, still a day ahead: %v past the log, want 17s", time.Duration(got-last))
	}
	if c := s.Metrics().EntryTimeClamped; c != clamped+2 {
		t.Errorf("bounded proposals counted %v, want %v", c, clamped+2)
	}
	in := time.Unix(0, last).Add(20 * time.Second)
	if got := s.ProposalTime(in, time.Minute+18*time.Second); got != in.UnixNano() {
		t.Fatalf("a wall clock in step: %v past the log, want 20s", time.Duration(got-last))
	}
}

// A root restarted with its wall clock a day behind keeps the log's
// time (it never goes back); once the clock is set right, its entries
// take the wall clock again at once, instead of the log's clock standing
// still while it makes up the day at a sixteenth of real time.
func TestRootClockBehindAtRestart(t *testing.T) {
	t.Parallel()
	clocks := &fakeClocks{}
	clocks.wall.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	o := clocks.options(Options{Name: "root-clock-behind", Dir: t.TempDir(), Logger: quietLogger()})
	s := openTest(t, o)
	mustWrite(t, s, set("k", "v"))
	last := s.AppliedTime()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	clocks.jump(-24 * time.Hour)
	s = openTest(t, o)
	clocks.pass(10 * time.Second)
	mustWrite(t, s, set("k", "behind"))
	if got := s.AppliedTime(); !got.Equal(last) {
		t.Fatalf("entry with the clock a day behind dated %v from the last, want the last's time", got.Sub(last))
	}
	clocks.jump(24 * time.Hour) // set right
	clocks.pass(10 * time.Second)
	mustWrite(t, s, set("k", "right"))
	if got, want := s.AppliedTime(), clocks.now(); !got.Equal(want) {
		t.Fatalf("entry once the clock was set right dated %v from the wall clock, want it", got.Sub(want))
	}
}

// An HA root member that first proposed while its log was behind (just
// restarted, not caught up) dates its later proposals from the log's
// time once others moved it, not from the older time it first saw: its
// proposals (a leader's heartbeats) keep moving the log's clock.
func TestProposalTimeFollowsTheLog(t *testing.T) {
	t.Parallel()
	clocks := &fakeClocks{}
	clocks.wall.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := openTest(t, clocks.options(Options{Name: "proposal-follows", Logger: quietLogger()}))
	mustWrite(t, s, set("k", "v"))
	stale := s.AppliedTime()
	if got := s.ProposalTime(stale.Add(time.Hour), 0); got != stale.UnixNano() {
		t.Fatalf("first proposal, log an hour behind: %v past the log, want 0", time.Duration(got-stale.UnixNano()))
	}
	clocks.pass(time.Hour) // the entries the others dated meanwhile
	mustWrite(t, s, set("k", "w"))
	now := s.AppliedTime()
	s.ProposalTime(now.Add(time.Second), time.Second)
	if got, want := s.ProposalTime(now.Add(2*time.Second), 2*time.Second), now.Add(2*time.Second).UnixNano(); got != want {
		t.Fatalf("proposal with the wall clock in step with the log: %v from it, want the wall clock", time.Duration(got-want))
	}
}
