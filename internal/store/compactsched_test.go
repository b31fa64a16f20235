package store

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// fakeCompactions is a database for the scheduler: an allowance, a
// number of compactions waiting, and the ones it was granted. mu plays
// Pebble's DB mutex: the database asks TrySchedule under it and records
// a refused compaction as waiting before releasing it.
type fakeCompactions struct {
	allowed atomic.Int64
	sampled atomic.Int64 // calls of GetAllowedWithoutPermission

	mu      sync.Mutex
	waiting int
	started []pebble.CompactionGrantHandle
}

func (f *fakeCompactions) GetAllowedWithoutPermission() int {
	f.sampled.Add(1)
	return int(f.allowed.Load())
}

func (f *fakeCompactions) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0, pebble.WaitingCompaction{}
}

func (f *fakeCompactions) Schedule(h pebble.CompactionGrantHandle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waiting == 0 {
		return false
	}
	f.waiting--
	f.started = append(f.started, h)
	return true
}

// ask is the database picking a compaction: it runs it if granted, else
// it waits.
func (f *fakeCompactions) ask(s *compactionScheduler) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok, h := s.TrySchedule()
	if ok {
		f.started = append(f.started, h)
	} else {
		f.waiting++
	}
	return ok
}

// finish ends every compaction started.
func (f *fakeCompactions) finish() {
	f.mu.Lock()
	hs := f.started
	f.started = nil
	f.mu.Unlock()
	for _, h := range hs {
		h.Done()
	}
}

func (f *fakeCompactions) counts() (started, waiting int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started), f.waiting
}

func waitStarted(t *testing.T, f *fakeCompactions, want int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if started, _ := f.counts(); started == want {
			return
		}
		if time.Now().After(deadline) {
			started, waiting := f.counts()
			t.Fatalf("%s: %d compactions started (%d waiting) after 30s, want %d", what, started, waiting, want)
		}
	}
}

// The scheduler runs as many compactions as the database allows; a
// refused one starts when a slot frees (Done) or, with no call at all,
// when the allowance grows (sampled while it waits). Once nothing waits
// it samples nothing: an idle database is not woken.
func TestCompactionScheduler(t *testing.T) {
	f := &fakeCompactions{}
	f.allowed.Store(1)
	s := newCompactionScheduler()
	s.Register(1, f)
	stopped := false
	defer func() {
		if !stopped {
			s.Unregister()
		}
	}()

	if !f.ask(s) {
		t.Fatal("the first compaction was refused with an allowance of 1")
	}
	if f.ask(s) {
		t.Fatal("a second compaction was granted with an allowance of 1")
	}
	// Done frees the slot: the waiting one starts.
	f.finish()
	waitStarted(t, f, 1, "after Done")

	// The allowance grows with no call (as after a flush): the sampling
	// starts the waiting one.
	if f.ask(s) {
		t.Fatal("granted beyond the allowance")
	}
	f.allowed.Store(2)
	waitStarted(t, f, 2, "after the allowance grew")

	// The compactions end and nothing waits: the scheduler stops
	// sampling.
	f.finish()
	idle := func() bool {
		before := f.sampled.Load()
		time.Sleep(3 * grantEvery)
		return f.sampled.Load() == before
	}
	quiet := false
	for range 20 {
		if quiet = idle(); quiet {
			break
		}
	}
	if !quiet {
		t.Fatal("the scheduler kept sampling the allowance with nothing waiting")
	}

	// A flush that raised the allowance (UpdateGetAllowedWithoutPermission)
	// starts a waiting compaction too.
	f.allowed.Store(1)
	f.ask(s)
	if f.ask(s) {
		t.Fatal("granted beyond the allowance")
	}
	f.allowed.Store(2)
	s.UpdateGetAllowedWithoutPermission()
	waitStarted(t, f, 2, "after a flush raised the allowance")

	s.Unregister()
	stopped = true
	if ok, _ := s.TrySchedule(); ok {
		t.Fatal("granted after Unregister")
	}
}
