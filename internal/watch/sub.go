package watch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// Sub is one subscription. It starts catching up from the log when it is
// behind the hub, reading on its caller's goroutine, then reads its
// prefix's feed; the handoff neither skips nor repeats an entry. A Sub is
// used by one goroutine.
type Sub struct {
	h      *Hub
	prefix []byte

	// Guarded by h.mu.
	feed *feed // nil when not live

	// Owned by the consuming goroutine.
	cursor   *node  // live: the last feed node consumed
	after    uint64 // live: changes through after were read from the log; skip them
	live     bool
	closed   bool
	err      error  // why the subscription ended; returned from then on
	next     uint64 // catching up: next index to read from the log
	last     uint64 // every change through last was returned
	lastTime int64  // commit time of last, when known
	batches  []*Batch
	timer    *time.Timer // progress wait
	rtimer   *time.Timer // rate wait of a turn
	lease    *time.Timer // ends a turn that lasts longer than turnLease

	holding atomic.Bool // the subscriber holds a write turn (see turns)
}

// Update is what Next returns: changes, or progress when there were none.
type Update struct {
	// Batches hold the changes in index order; an entry's changes are
	// never split across updates. Empty for a progress update. Batches
	// are shared with other subscribers (read only), and the slice is
	// valid until the next call of Next.
	Batches []*Batch
	// Index: every change under the prefix through Index has been returned.
	Index uint64
	// Time is the commit time of entry Index, zero if unknown.
	Time time.Time
}

// Events returns the changes of u as one slice (a copy).
func (u Update) Events() []Event {
	var out []Event
	for _, b := range u.Batches {
		out = append(out, b.Events...)
	}
	return out
}

// Next returns the next changes, waiting at most wait for them; if none
// come it returns a progress update (no events) with the index the
// subscriber is complete through. wait 0 returns at once.
//
// Next returns holding one of the budget's write turns (Limits.WriteRate,
// WriteConcurrency): it waits for the turn, then returns everything that
// arrived meanwhile, up to Config.CoalesceBytes. The caller writes it at
// once, in one write, and then calls Delivered, which ends the turn (so
// do the next Next, Close, and a write lasting longer than turnLease).
//
// It fails with ctx's error, with ErrSlow when the subscriber fell behind
// its prefix's buffer, with an error wrapping store.ErrLogTruncated when
// the hub fell behind the log, or ErrClosed when the hub stopped; changes
// that came before a fall behind are returned first. A failing Next holds
// no turn.
func (s *Sub) Next(ctx context.Context, wait time.Duration) (Update, error) {
	s.endTurn()
	switch {
	case s.closed:
		return Update{}, ErrClosed
	case s.err != nil:
		return Update{}, s.err
	}
	select {
	case <-s.h.done:
		return Update{}, s.fail(ErrClosed, cutShutdown)
	default:
	}
	if !s.live {
		u, err := s.catchUp(ctx)
		if err != nil {
			return u, err
		}
		if len(u.Batches) > 0 {
			if err := s.startTurn(ctx); err != nil {
				return Update{}, err
			}
			return u, nil
		}
	}
	if wait > 0 && s.cursor.next.Load() == nil {
		if s.timer == nil {
			s.timer = time.NewTimer(wait)
		} else {
			s.timer.Reset(wait)
		}
		select {
		case <-s.cursor.ready:
			s.timer.Stop()
		case <-s.timer.C:
		case <-ctx.Done():
			s.timer.Stop()
			return Update{}, ctx.Err()
		case <-s.h.done:
			s.timer.Stop()
			return Update{}, s.fail(ErrClosed, cutShutdown)
		}
	}
	if err := s.startTurn(ctx); err != nil {
		return Update{}, err
	}
	u, err := s.collect()
	if err != nil {
		s.endTurn()
	}
	return u, err
}

// startTurn waits for a write turn and holds it.
func (s *Sub) startTurn(ctx context.Context) error {
	if err := s.h.budget.turns.acquire(ctx, s.h.done, &s.rtimer); err != nil {
		if errors.Is(err, ErrClosed) {
			return s.fail(err, cutShutdown)
		}
		return err
	}
	s.holding.Store(true)
	if s.lease == nil {
		s.lease = time.AfterFunc(turnLease, s.leaseExpired)
	} else {
		s.lease.Reset(turnLease)
	}
	return nil
}

// endTurn gives back the write turn the subscriber holds, if any.
func (s *Sub) endTurn() {
	if s.lease != nil {
		s.lease.Stop()
	}
	if s.holding.CompareAndSwap(true, false) {
		s.h.budget.turns.release()
	}
}

// leaseExpired ends a turn whose write takes longer than turnLease (a
// client not reading, a descheduled thread), so that it holds up no other
// watcher; the write goes on outside the budget. Should a late call from
// an earlier turn end a newer one early, one more watcher writes at once:
// the slots stay balanced.
func (s *Sub) leaseExpired() {
	if s.holding.CompareAndSwap(true, false) {
		s.h.metrics.turnLeaseExpired.Inc() // before the release wakes a waiter that may read it
		s.h.budget.turns.release()
	}
}

// fail ends the subscription with err, counted under reason.
func (s *Sub) fail(err error, reason string) error {
	if s.err == nil {
		s.err = err
		s.h.metrics.cut[reason].Inc()
	}
	return s.err
}

// collect returns the feed's batches after the cursor, up to
// Config.CoalesceBytes, or progress when there are none. A failure found
// after some batches is returned by the next call.
func (s *Sub) collect() (Update, error) {
	// Load the hub's position before looking at the feed: the hub appends
	// to the feeds before it moves pos, so a consumed feed means every
	// change through p was returned.
	p := s.h.pos.Load()
	s.batches = s.batches[:0]
	size := 0
	for {
		n := s.cursor.next.Load()
		if n == nil {
			break
		}
		if n.err != nil {
			if len(s.batches) > 0 {
				break
			}
			return Update{}, s.fail(n.err, cutTruncated)
		}
		b := n.batch.Load()
		if b == nil { // evicted before this subscriber read it
			if len(s.batches) > 0 {
				break
			}
			return Update{}, s.fail(ErrSlow, cutSlow)
		}
		if len(s.batches) > 0 && size+b.size > s.h.cfg.CoalesceBytes {
			break
		}
		s.cursor = n
		if b = s.skipRead(b); b != nil {
			s.batches = append(s.batches, b)
			size += b.size
		}
	}
	if len(s.batches) > 0 {
		return s.deliver(s.batches), nil
	}
	if p.index > s.last || (p.index == s.last && s.lastTime == 0) {
		s.last, s.lastTime = p.index, p.time
	}
	return Update{Index: s.last, Time: unixTime(s.lastTime)}, nil
}

// skipRead returns b without the changes the subscriber read from the log
// before it joined the feed (nil if nothing is left).
func (s *Sub) skipRead(b *Batch) *Batch {
	if s.after < b.Events[0].Index {
		return b
	}
	for i := range b.Events {
		if b.Events[i].Index > s.after {
			return newBatch(b.Events[i:])
		}
	}
	return nil
}

func (s *Sub) deliver(bs []*Batch) Update {
	lb := bs[len(bs)-1]
	l := &lb.Events[len(lb.Events)-1]
	s.last, s.lastTime = l.Index, l.Time
	return Update{Batches: bs, Index: l.Index, Time: unixTime(l.Time)}
}

// catchUp reads the log from s.next until it finds changes under the
// prefix or reaches the hub's position and joins the feed. It returns an
// empty update once live.
func (s *Sub) catchUp(ctx context.Context) (Update, error) {
	h := s.h
	for {
		if err := ctx.Err(); err != nil {
			return Update{}, err
		}
		h.mu.Lock()
		if h.mu.closed {
			h.mu.Unlock()
			return Update{}, s.fail(ErrClosed, cutShutdown)
		}
		s.live = h.tryJoinLocked(s)
		h.mu.Unlock()
		if s.live {
			return Update{}, nil
		}
		entries, err := h.st.ReadLog(s.next, h.cfg.ReadBatchEntries, h.cfg.ReadBatchBytes)
		switch {
		case errors.Is(err, store.ErrLogTruncated):
			return Update{}, s.fail(fmt.Errorf("watch: %w: re-read the data (scan) and watch from the scan's index", err), cutTruncated)
		case errors.Is(err, store.ErrClosed):
			return Update{}, s.fail(ErrClosed, cutShutdown)
		case err != nil:
			return Update{}, fmt.Errorf("watch: read log from %d: %w", s.next, err)
		case len(entries) == 0:
			continue // the hub is at least as far as the log: the next tryJoin succeeds
		}
		evs := appendMatching(nil, entries, s.prefix)
		l := &entries[len(entries)-1]
		s.next = l.Index + 1
		if len(evs) > 0 {
			s.batches = append(s.batches[:0], newBatch(evs))
			return s.deliver(s.batches), nil
		}
		s.last, s.lastTime = l.Index, l.Time
	}
}

// LastIndex is the index the subscriber has returned every change
// through: where a new subscription resumes without a gap.
func (s *Sub) LastIndex() uint64 { return s.last }

// Delivered records that u was written to the watcher at time at (one
// write, its changes and, once per entry, the delivery delay) and ends
// the write turn.
func (s *Sub) Delivered(u Update, at time.Time) {
	s.endTurn()
	s.h.metrics.writes.Inc()
	if len(u.Batches) == 0 {
		return
	}
	now := at.UnixNano()
	n := 0
	var prev uint64
	for _, b := range u.Batches {
		n += len(b.Events)
		for i := range b.Events {
			e := &b.Events[i]
			if e.Index == prev || e.Time == 0 {
				continue
			}
			prev = e.Index
			s.h.metrics.deliveryDelay.Observe(max(0, float64(now-e.Time)/1e9))
		}
	}
	s.h.metrics.eventsSent.Add(float64(n))
}

// Close ends the subscription. It is safe to call more than once.
func (s *Sub) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.endTurn()
	if s.timer != nil {
		s.timer.Stop()
	}
	h := s.h
	h.mu.Lock()
	h.leaveLocked(s)
	h.mu.Unlock()
	h.budget.leave()
	h.watchers.Dec()
	s.cursor = nil
}
