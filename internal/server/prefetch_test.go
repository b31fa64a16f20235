package server

import (
	"slices"
	"testing"

	"github.com/quicksilver-kv/qs/internal/repl"
)

// TestPlanSubscriptions: a relay already subscribed to stays; a new one
// is added once however often it is named; one no longer named is
// dropped.
func TestPlanSubscriptions(t *testing.T) {
	for _, c := range []struct {
		have, want, add, drop []string
	}{
		{nil, nil, nil, nil},
		{nil, []string{"b:1", "a:1"}, []string{"a:1", "b:1"}, nil},
		{[]string{"a:1", "b:1"}, []string{"b:1", "a:1"}, nil, nil},
		{[]string{"a:1", "b:1"}, []string{"b:1", "c:1", "c:1"}, []string{"c:1"}, []string{"a:1"}},
		{[]string{"a:1", "b:1"}, nil, nil, []string{"a:1", "b:1"}},
	} {
		add, drop := planSubscriptions(c.have, c.want)
		if !slices.Equal(add, c.add) || !slices.Equal(drop, c.drop) {
			t.Errorf("planSubscriptions(%v, %v) = %v, %v; want %v, %v", c.have, c.want, add, drop, c.add, c.drop)
		}
	}
}

// fakeSub is a subscription that counts what it admitted.
type fakeSub struct {
	relay    string
	admitted int64
	closed   bool
}

func (f *fakeSub) Stats() repl.PrefetchStats { return repl.PrefetchStats{Admitted: f.admitted} }
func (f *fakeSub) Close()                    { f.closed = true }

// TestPrefetchSetFollowsRelays: the set subscribes to each relay named,
// keeps the subscriptions of relays named again, closes those of relays
// no longer named (their counts stay in the totals), subscribes to none
// while empty, and does nothing after Close.
func TestPrefetchSetFollowsRelays(t *testing.T) {
	var started []*fakeSub
	ps := newPrefetchSet(func(relay string) subscription {
		f := &fakeSub{relay: relay, admitted: 10}
		started = append(started, f)
		return f
	})
	ps.set([]string{"r1:7390", "r2:7390"})
	if got := ps.relays(); !slices.Equal(got, []string{"r1:7390", "r2:7390"}) || len(started) != 2 {
		t.Fatalf("subscribed to %v (%d started), want r1 and r2", got, len(started))
	}
	// r1 dies, r3 is elected: r2 keeps its subscription.
	ps.set([]string{"r2:7390", "r3:7390"})
	if got := ps.relays(); !slices.Equal(got, []string{"r2:7390", "r3:7390"}) || len(started) != 3 {
		t.Fatalf("subscribed to %v (%d started), want r2 and r3, one new", got, len(started))
	}
	for _, f := range started {
		if f.closed != (f.relay == "r1:7390") {
			t.Fatalf("subscription to %s closed = %v", f.relay, f.closed)
		}
	}
	if got := ps.Stats().Admitted; got != 30 {
		t.Fatalf("admitted %d, want 30 (the closed subscription's 10 kept)", got)
	}
	// Elected relay itself: no relay to subscribe to.
	ps.set(nil)
	if got := ps.relays(); len(got) != 0 {
		t.Fatalf("subscribed to %v with no relay", got)
	}
	if got := ps.Stats().Admitted; got != 30 {
		t.Fatalf("admitted %d after unsubscribing, want 30", got)
	}
	ps.set([]string{"r4:7390"})
	ps.Close()
	ps.set([]string{"r5:7390"})
	if got := ps.relays(); len(got) != 0 || len(started) != 4 || !started[3].closed {
		t.Fatalf("after Close: subscribed to %v, %d started", got, len(started))
	}
}
