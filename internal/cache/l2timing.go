package cache

import (
	"fmt"
	"time"
)

// The timing of the L2 tier: its defaults, and the bounds of the
// settings (CheckL2Timing).
const (
	// DefaultL2AttemptTimeout: an L2 hit is a loopback or data-centre
	// round trip; a peer that has not answered by then costs a reader
	// no more than this before the next tier is asked.
	DefaultL2AttemptTimeout = 100 * time.Millisecond
	DefaultL2SidelineMin    = 200 * time.Millisecond
	DefaultL2SidelineMax    = 10 * time.Second

	// MinL2Timing is the least of each setting: below it a request or a
	// sideline ends before a round trip can.
	MinL2Timing = time.Millisecond
	// MaxL2AttemptTimeout: an L2 request waited on longer is slower than
	// fetching from the replicas it stands in front of.
	MaxL2AttemptTimeout = 10 * time.Second
	// MaxL2SidelineMin and MaxL2SidelineMax bound how long a peer that
	// came back may stay unused.
	MaxL2SidelineMin = time.Minute
	MaxL2SidelineMax = time.Hour
)

// CheckL2Timing reports the first L2 setting out of bounds: attempt,
// sidelineMin and sidelineMax (0 each: the default) against their bounds
// and each other, and the attempt timeout against fetchTimeout, the
// time a read's fetch may take in all (0: not checked), which must leave
// room for the next tier. Pure.
func CheckL2Timing(attempt, sidelineMin, sidelineMax, fetchTimeout time.Duration) error {
	or := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	attempt = or(attempt, DefaultL2AttemptTimeout)
	sidelineMin = or(sidelineMin, DefaultL2SidelineMin)
	sidelineMax = or(sidelineMax, DefaultL2SidelineMax)
	switch {
	case attempt < MinL2Timing || attempt > MaxL2AttemptTimeout:
		return fmt.Errorf("L2 attempt timeout %v: want %v to %v", attempt, MinL2Timing, MaxL2AttemptTimeout)
	case fetchTimeout > 0 && attempt >= fetchTimeout:
		return fmt.Errorf("L2 attempt timeout %v: want below the fetch timeout %v, which must leave time to fetch a miss from the next tier", attempt, fetchTimeout)
	case sidelineMin < MinL2Timing || sidelineMin > MaxL2SidelineMin:
		return fmt.Errorf("L2 sideline %v: want %v to %v", sidelineMin, MinL2Timing, MaxL2SidelineMin)
	case sidelineMax < sidelineMin || sidelineMax > MaxL2SidelineMax:
		return fmt.Errorf("L2 sideline max %v: want the sideline (%v) to %v", sidelineMax, sidelineMin, MaxL2SidelineMax)
	}
	return nil
}
