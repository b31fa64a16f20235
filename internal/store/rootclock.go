package store

import "time"

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
// is never before the last entry's (the log's clock never goes back).
//
// The first stamp after the store opens takes the wall clock as it is:
// nothing measured how long the root was down (check a root's clock
// before starting it; qs_store_log_clock_ahead_seconds shows a log dated
// ahead of a node's clock).
type rootClock struct {
	anchored bool
	at       time.Duration // the anchor's elapsed reading
	log      int64         // the log time (Unix ns) the anchor stands for
}

// stamp returns the time of an entry appended at wall time wall and
// elapsed reading elapsed after an entry dated last, and whether the wall
// clock was further ahead than real time allows.
func (rc *rootClock) stamp(wall int64, elapsed time.Duration, last int64) (t int64, clamped bool) {
	if rc.anchored {
		d := max(int64(elapsed-rc.at), 0)
		expected := rc.log + d + d/16
		if wall-expected > maxProposedClockStep {
			rc.at, rc.log = elapsed, expected
			return max(expected, last), true
		}
	}
	rc.anchored, rc.at, rc.log = true, elapsed, wall
	return max(wall, last), false
}
