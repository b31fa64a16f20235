package store

import (
	"sync"
	"time"
)

// rootClock is the clock a single root stamps its entries with: the
// local wall clock, as long as it keeps the pace of real time. A forward
// jump of the wall clock (an operator's mistake, a bad time source) would
// otherwise date every later entry ahead for good: batch outcomes would
// expire at once (a retried write applied twice), MVCC history would
// expire, and replica lag would read below 0.
//
// Real time is measured apart from the wall clock (Options.Elapsed, Go's
// monotonic clock by default). The clock keeps an anchor: an elapsed
// reading and the log time it stands for. The stamp for a wall time is
// that wall time if it is at most maxProposedClockStep past the anchor's
// log time plus the real time elapsed since it (the anchor then moves
// there); otherwise it is the anchor's log time plus the real time
// elapsed and a sixteenth more. While the wall clock is far ahead, the
// log's clock thus runs at most 6.25% fast until the two meet again: a
// genuine forward correction of the clock is caught up in time, and a
// wrong one expires outcomes and history at most that much early. A stamp
// is never before the last entry's (the log's clock never goes back), and
// the anchor is the stamp: a wall clock set back, then right again, finds
// the log's clock where real time took it, not frozen until a sixteenth
// of real time makes up the setback; and an HA root member that first
// proposed before it caught up with the log (others dated entries since)
// goes on from the log's time, not from the older one it anchored at.
//
// The first anchor is the log's own time, learned when the store opens
// (the last entry's time, at that elapsed reading) or, for a log that
// was empty then, at the first stamp after an entry: the first entry
// after a restart is thus at most maxProposedClockStep past the last
// one's time plus the real time since the store opened, however far
// ahead the wall clock is at start. Nothing measures how long the root
// was down, so after a long stop the log's clock resumes behind the wall
// clock and catches up at a sixteenth of real time (keys expire that
// much late; qs_store_log_clock_ahead_seconds shows the distance). An
// empty log takes the wall clock as it is.
type rootClock struct {
	anchored bool
	at       time.Duration // the anchor's elapsed reading
	log      int64         // the log time (Unix ns) the anchor stands for
}

// learn anchors an unanchored clock at the log time last (0: none),
// known at elapsed reading elapsed.
func (rc *rootClock) learn(last int64, elapsed time.Duration) {
	if !rc.anchored && last > 0 {
		rc.anchored, rc.at, rc.log = true, elapsed, last
	}
}

// stamp returns the time of an entry appended at wall time wall and
// elapsed reading elapsed after an entry dated last, and whether the wall
// clock was further ahead than real time allows.
func (rc *rootClock) stamp(wall int64, elapsed time.Duration, last int64) (t int64, clamped bool) {
	rc.learn(last, elapsed)
	t = wall
	if rc.anchored {
		d := max(int64(elapsed-rc.at), 0)
		if expected := rc.log + d + d/16; wall-expected > maxProposedClockStep {
			t, clamped = expected, true
		}
	}
	t = max(t, last)
	rc.anchored, rc.at, rc.log = true, elapsed, t
	return t, clamped
}

// proposalClock bounds the times a member of an HA root proposes, as
// rootClock bounds a single root's: each member stamps its proposals
// (writes, and the leader's heartbeats) from its own clock, anchored at
// the log's time when it first proposes, so a member whose wall clock is
// far ahead, becoming leader or proposing a write, moves the log's clock
// no faster than real time (and a sixteenth). The evaluator bounds every
// proposed time again, from the log alone (boundTime). Safe for
// concurrent use.
type proposalClock struct {
	mu    sync.Mutex
	clock rootClock
}

// ProposalTime is the time (Unix ns) a member of an HA root proposes
// for an entry at wall time wall and real-time reading elapsed (a
// monotonic clock's, unmoved by changes of the wall clock): wall, bounded
// from the log's applied time as a single root's stamps are. Counted in
// qs_store_entry_time_clamped_total when bounded.
func (s *Store) ProposalTime(wall time.Time, elapsed time.Duration) int64 {
	s.proposals.mu.Lock()
	_, applied := s.AppliedPosition()
	t, clamped := s.proposals.clock.stamp(wall.UnixNano(), elapsed, applied)
	s.proposals.mu.Unlock()
	if clamped {
		s.m.clockClamped.Inc()
	}
	return t
}
