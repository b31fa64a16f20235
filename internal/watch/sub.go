package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// Sub is one subscription. It starts catching up from the log when it is
// behind the hub, reading on its caller's goroutine, then joins the hub's
// live feed; the handoff neither skips nor repeats an entry. A Sub is used
// by one goroutine.
type Sub struct {
	h      *Hub
	prefix []byte
	ch     chan []Event  // live batches; sent by the hub under h.mu, never closed
	done   chan struct{} // closed by the hub when it cuts the subscriber

	// Guarded by h.mu.
	err   error  // why the hub cut it; set before done is closed
	after uint64 // the hub skips entries up to here (already read from the log)
	g     *group // nil when not live

	// Owned by the consuming goroutine.
	live     bool
	closed   bool
	next     uint64 // catching up: next index to read from the log
	last     uint64 // every change through last was returned
	lastTime int64  // commit time of last, when known
	timer    *time.Timer
}

// Update is what Next returns: changes, or progress when there were none.
type Update struct {
	// Events are changes in index order; an entry's changes are never
	// split across updates. Empty for a progress update.
	Events []Event
	// Index: every change under the prefix through Index has been returned.
	Index uint64
	// Time is the commit time of entry Index, zero if unknown.
	Time time.Time
}

// Next returns the next changes, waiting at most wait for them; if none
// come it returns a progress update (no events) with the index the
// subscriber is complete through. wait 0 returns at once. It fails with
// ctx's error, with ErrSlow or an error wrapping store.ErrLogTruncated
// when the subscriber was cut, or ErrClosed when the hub stopped; changes
// queued before a cut are returned first.
func (s *Sub) Next(ctx context.Context, wait time.Duration) (Update, error) {
	if s.closed {
		return Update{}, ErrClosed
	}
	deadline := time.Now().Add(wait)
	if !s.live {
		u, err := s.catchUp(ctx)
		if err != nil || len(u.Events) > 0 {
			return u, err
		}
	}
	select {
	case evs := <-s.ch:
		return s.deliver(evs), nil
	default:
	}
	if d := time.Until(deadline); d > 0 {
		if s.timer == nil {
			s.timer = time.NewTimer(d)
		} else {
			s.timer.Reset(d)
		}
		select {
		case evs := <-s.ch:
			s.timer.Stop()
			return s.deliver(evs), nil
		case <-s.done:
			s.timer.Stop()
		case <-ctx.Done():
			s.timer.Stop()
			return Update{}, ctx.Err()
		case <-s.timer.C:
		}
	}
	// Load the hub's position before looking at the channel and the cut
	// signal: the hub sends (or cuts) before it moves pos, so an empty
	// channel of a sub still live means everything through p was returned.
	p := s.h.pos.Load()
	select {
	case evs := <-s.ch:
		return s.deliver(evs), nil
	default:
	}
	select {
	case <-s.done:
		s.h.mu.Lock()
		err := s.err
		s.h.mu.Unlock()
		return Update{}, err
	default:
	}
	if p.index > s.last || (p.index == s.last && s.lastTime == 0) {
		s.last, s.lastTime = p.index, p.time
	}
	return Update{Index: s.last, Time: unixTime(s.lastTime)}, nil
}

func (s *Sub) deliver(evs []Event) Update {
	l := &evs[len(evs)-1]
	s.last, s.lastTime = l.Index, l.Time
	return Update{Events: evs, Index: l.Index, Time: unixTime(l.Time)}
}

// catchUp reads the log from s.next until it finds changes under the
// prefix or reaches the hub's position and joins the live feed. It returns
// an empty update once live.
func (s *Sub) catchUp(ctx context.Context) (Update, error) {
	h := s.h
	for {
		if err := ctx.Err(); err != nil {
			return Update{}, err
		}
		h.mu.Lock()
		if h.mu.closed {
			h.mu.Unlock()
			return Update{}, ErrClosed
		}
		s.live = h.tryJoinLocked(s)
		h.mu.Unlock()
		if s.live {
			return Update{}, nil
		}
		entries, err := h.st.ReadLog(s.next, h.cfg.ReadBatchEntries, h.cfg.ReadBatchBytes)
		switch {
		case errors.Is(err, store.ErrLogTruncated):
			subscribersCutTotal.WithLabelValues(cutTruncated).Inc()
			return Update{}, fmt.Errorf("watch: %w: re-read the data (scan) and watch from the scan's index", err)
		case errors.Is(err, store.ErrClosed):
			return Update{}, ErrClosed
		case err != nil:
			return Update{}, fmt.Errorf("watch: read log from %d: %w", s.next, err)
		case len(entries) == 0:
			continue // the hub is at least as far as the log: the next tryJoin succeeds
		}
		evs := appendMatching(nil, entries, s.prefix)
		l := &entries[len(entries)-1]
		s.next = l.Index + 1
		if len(evs) > 0 {
			return s.deliver(evs), nil
		}
		s.last, s.lastTime = l.Index, l.Time
	}
}

// LastIndex is the index the subscriber has returned every change
// through: where a new subscription resumes without a gap.
func (s *Sub) LastIndex() uint64 { return s.last }

// Delivered records that u was written to the watcher at time at: the
// events_sent_total counter and, once per entry, the delivery delay.
func (s *Sub) Delivered(u Update, at time.Time) {
	if len(u.Events) == 0 {
		return
	}
	eventsSentTotal.Add(float64(len(u.Events)))
	now := at.UnixNano()
	var prev uint64
	for i := range u.Events {
		e := &u.Events[i]
		if e.Index == prev || e.Time == 0 {
			continue
		}
		prev = e.Index
		deliveryDelaySeconds.Observe(max(0, float64(now-e.Time)/1e9))
	}
}

// Close ends the subscription. It is safe to call more than once.
func (s *Sub) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	h := s.h
	h.mu.Lock()
	h.leaveLocked(s)
	h.mu.n--
	h.mu.Unlock()
	h.watchers.Dec()
}

// Pending is how many batches of changes are queued for a live
// subscriber: while it is above zero, Next returns changes at once. A
// writer that fell behind uses it to coalesce batches into one write.
func (s *Sub) Pending() int {
	if !s.live || s.closed {
		return 0
	}
	return len(s.ch)
}
