package server

import (
	"slices"
	"sync"

	"github.com/quicksilver-kv/qs/internal/repl"
)

// subscription is one prefetch subscription (a repl.Prefetcher of one
// relay).
type subscription interface {
	Stats() repl.PrefetchStats
	Close()
}

// prefetchSet keeps one prefetch subscription to each relay a proxy
// whose pool comes from the overlay fetches through: set follows the
// relays elected now, opening a subscription to a new relay and closing
// that of a relay no longer asked, without touching the others. An
// elected relay asks no relay, so it subscribes to none.
type prefetchSet struct {
	start func(relay string) subscription
	mu    sync.Mutex
	subs  map[string]subscription
	// closedAdmitted is the values admitted by subscriptions closed so
	// far: the status counts since the process started.
	closedAdmitted int64
	closed         bool
}

func newPrefetchSet(start func(relay string) subscription) *prefetchSet {
	return &prefetchSet{start: start, subs: map[string]subscription{}}
}

// planSubscriptions is what a proxy subscribed to have does to be
// subscribed to want: the relays to subscribe to, and those to
// unsubscribe from, each sorted. Pure.
func planSubscriptions(have, want []string) (add, drop []string) {
	for _, a := range want {
		if !slices.Contains(have, a) && !slices.Contains(add, a) {
			add = append(add, a)
		}
	}
	for _, a := range have {
		if !slices.Contains(want, a) {
			drop = append(drop, a)
		}
	}
	slices.Sort(add)
	slices.Sort(drop)
	return add, drop
}

// set makes relays the subscribed set. After Close it does nothing.
func (p *prefetchSet) set(relays []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	have := make([]string, 0, len(p.subs))
	for a := range p.subs {
		have = append(have, a)
	}
	add, drop := planSubscriptions(have, relays)
	for _, a := range drop {
		s := p.subs[a]
		s.Close()
		p.closedAdmitted += s.Stats().Admitted
		delete(p.subs, a)
	}
	for _, a := range add {
		p.subs[a] = p.start(a)
	}
}

// relays are the relays subscribed to now, sorted.
func (p *prefetchSet) relays() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.subs))
	for a := range p.subs {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Stats sums the counts of every subscription, closed ones included.
func (p *prefetchSet) Stats() repl.PrefetchStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := repl.PrefetchStats{Admitted: p.closedAdmitted}
	for _, s := range p.subs {
		c := s.Stats()
		st.Received += c.Received
		st.Admitted += c.Admitted
		st.Dropped += c.Dropped
		st.Refused += c.Refused
	}
	return st
}

// Close ends every subscription; set does nothing afterwards.
func (p *prefetchSet) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for a, s := range p.subs {
		s.Close()
		p.closedAdmitted += s.Stats().Admitted
		delete(p.subs, a)
	}
}
