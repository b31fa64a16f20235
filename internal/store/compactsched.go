package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactionScheduler lets Pebble run as many compactions at once as the
// database allows without permission (GetAllowedWithoutPermission), as
// Pebble's default scheduler (ConcurrencyLimitScheduler) does. It differs
// only in when it wakes. A refused compaction waits in the database, which
// then stops asking (it picks no new compaction while one waits); the
// allowance can grow without a call (after a flush), so the scheduler
// samples it every grantEvery to start the waiting one. Pebble's samples
// for the life of the database, waking every idle server ten times a
// second; this one samples only while a compaction it refused waits, and
// is otherwise woken by the calls that can free a slot (Done, and
// UpdateGetAllowedWithoutPermission after a flush).
type compactionScheduler struct {
	db      pebble.DBForCompaction // set by Register, before any other call
	poke    chan struct{}          // wakes the granter; buffered
	stop    chan struct{}          // closed by Unregister
	stopped chan struct{}          // closed when the granter returned

	mu struct {
		sync.Mutex
		running     int  // compactions granted and not Done
		lastAllowed int  // GetAllowedWithoutPermission when last sampled
		waiting     bool // a refused compaction may be waiting in the database
		refusals    uint64
		// granting: a grant round runs (outside mu); grantDone signals
		// its end. unregistered: no more grants.
		granting     bool
		grantDone    *sync.Cond
		unregistered bool
	}
}

// grantEvery is how often a waiting compaction's chance is sampled.
const grantEvery = 100 * time.Millisecond

var _ pebble.CompactionScheduler = (*compactionScheduler)(nil)

func newCompactionScheduler() *compactionScheduler {
	s := &compactionScheduler{poke: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	s.mu.grantDone = sync.NewCond(&s.mu.Mutex)
	return s
}

func (s *compactionScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.db = db
	go s.granter()
}

// Unregister stops the granter and waits for any grant round to end.
func (s *compactionScheduler) Unregister() {
	close(s.stop)
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.unregistered = true
	for s.mu.granting {
		s.mu.grantDone.Wait()
	}
}

// TrySchedule is called by the database, under its mutex, when it picked
// a compaction.
func (s *compactionScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.unregistered {
		return false, nil
	}
	s.mu.lastAllowed = s.db.GetAllowedWithoutPermission()
	if s.mu.lastAllowed > s.mu.running {
		s.mu.running++
		return true, s
	}
	s.mu.refusals++
	if !s.mu.waiting {
		s.mu.waiting = true
		s.wake() // to start sampling
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission is called after a flush, which may
// have raised the allowance.
func (s *compactionScheduler) UpdateGetAllowedWithoutPermission() {
	s.mu.Lock()
	allowed := s.db.GetAllowedWithoutPermission()
	raised := allowed > s.mu.lastAllowed
	s.mu.lastAllowed = allowed
	s.mu.Unlock()
	if raised {
		s.wake()
	}
}

// The grant handle's methods; Done frees a slot.
func (s *compactionScheduler) Started()                                          {}
func (s *compactionScheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *compactionScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}
func (s *compactionScheduler) Done() {
	s.mu.Lock()
	s.mu.running--
	s.mu.Unlock()
	s.grant()
}

func (s *compactionScheduler) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// granter grants when woken, and every grantEvery while a compaction may
// be waiting.
func (s *compactionScheduler) granter() {
	defer close(s.stopped)
	var tick *time.Ticker
	var ticks <-chan time.Time
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-s.poke:
		case <-ticks:
		}
		s.grant()
		s.mu.Lock()
		waiting := s.mu.waiting
		s.mu.Unlock()
		switch {
		case waiting && tick == nil:
			tick = time.NewTicker(grantEvery)
			ticks = tick.C
		case !waiting && tick != nil:
			tick.Stop()
			tick, ticks = nil, nil
		}
	}
}

// grant starts waiting compactions while the allowance has room, one
// round at a time, never holding mu while it calls the database (which
// calls TrySchedule under its own mutex).
func (s *compactionScheduler) grant() {
	s.mu.Lock()
	for s.mu.granting {
		s.mu.grantDone.Wait()
	}
	if s.mu.unregistered {
		s.mu.Unlock()
		return
	}
	s.mu.lastAllowed = s.db.GetAllowedWithoutPermission()
	room := s.mu.lastAllowed - s.mu.running
	if room <= 0 {
		s.mu.Unlock()
		return
	}
	s.mu.granting = true
	refusals := s.mu.refusals
	s.mu.Unlock()
	// GetWaitingCompaction only when a grant is possible: it picks one.
	waiting := true
	for room > 0 {
		if waiting, _ = s.db.GetWaitingCompaction(); !waiting {
			break
		}
		if !s.db.Schedule(s) {
			break
		}
		s.mu.Lock()
		s.mu.running++
		s.mu.Unlock()
		room--
	}
	s.mu.Lock()
	if !waiting && s.mu.refusals == refusals {
		// Nothing waits, and nothing was refused since the database said
		// so.
		s.mu.waiting = false
	}
	s.mu.granting = false
	s.mu.grantDone.Broadcast()
	s.mu.Unlock()
}
