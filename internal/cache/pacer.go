package cache

import "time"

// Pacer paces the eviction sweeps of a cache that cannot shrink: while
// whole turns of the hand find nothing to evict (everything over the
// budget is in the window, or was just used), the keeper idles for a
// doubling time, up to MaxIdle, and then looks at one slice per tick
// instead of a whole turn. It is not safe for concurrent use (the keeper
// owns it).
type Pacer struct {
	tick  time.Duration // the keeper's interval: the first idle time
	idle  time.Duration
	until time.Time
	at    uint64 // the applied index when the idling began
	found bool   // the hand found something since its turn began
}

// MaxIdle bounds the time a keeper idles.
const MaxIdle = time.Second

// NewPacer returns a pacer for a keeper ticking every tick.
func NewPacer(tick time.Duration) *Pacer { return &Pacer{tick: tick} }

// Idle reports whether the keeper may skip this tick: it idles and the
// window did not move (applied is the index the idling began at; when
// the window moves, values may have left it).
func (p *Pacer) Idle(now time.Time, applied uint64) bool {
	return now.Before(p.until) && applied == p.at
}

// Rounds is how many sweep rounds the keeper runs this tick, at most
// full: one while idling.
func (p *Pacer) Rounds(full int) int {
	if p.idle > 0 {
		return 1
	}
	return full
}

// Found records a round that found values to evict.
func (p *Pacer) Found() { p.found, p.idle = true, 0 }

// Cycled records that the hand completed a turn at time now with the
// window at applied; a turn that found nothing doubles the idle time.
func (p *Pacer) Cycled(now time.Time, applied uint64) {
	if !p.found {
		p.idle = min(max(2*p.idle, p.tick), MaxIdle)
		p.until, p.at = now.Add(p.idle), applied
	}
	p.found = false
}

// IdleFor is the current idle time (zero while sweeps find values).
func (p *Pacer) IdleFor() time.Duration { return p.idle }
