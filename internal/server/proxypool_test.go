package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/discovery"
)

// notifier is a change notification like discovery.Overlay.Changed.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
	n  int // channels handed out
}

func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	n.n++
	return n.ch
}

func (n *notifier) fire() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

func (n *notifier) handedOut() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.n
}

// TestSettle: settle returns once no change came for the quiet time; a
// change meanwhile makes it wait again; a stream of changes cannot hold
// it past its limit; it reports false when its context ends.
func TestSettle(t *testing.T) {
	var n notifier
	if !settle(context.Background(), n.changed, time.Millisecond, time.Hour) {
		t.Fatal("no change: settle did not return true")
	}

	// Each change makes settle wait again: it asks for the next
	// notification after each (with an hour's quiet time, it returns only
	// when its context ends).
	var m notifier
	ctx0, cancel0 := context.WithCancel(context.Background())
	done := make(chan bool, 1)
	go func() { done <- settle(ctx0, m.changed, time.Hour, time.Hour) }()
	for i := 0; i < 5; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for m.handedOut() < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("settle did not wait for notification %d", i+1)
			}
			time.Sleep(time.Millisecond)
		}
		m.fire()
	}
	cancel0()
	if <-done {
		t.Fatal("settle whose context ended returned true")
	}
	if m.handedOut() < 5 {
		t.Fatalf("settle asked for %d notifications during a burst of 5", m.handedOut())
	}

	// An endless stream of changes: the limit ends the wait.
	var e notifier
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			e.fire()
			time.Sleep(time.Millisecond)
		}
	}()
	if !settle(context.Background(), e.changed, time.Hour, 50*time.Millisecond) {
		t.Fatal("settle under endless changes returned false")
	}

	// The context ends first.
	ended, stopNow := context.WithCancel(context.Background())
	stopNow()
	if settle(ended, e.changed, time.Hour, time.Hour) {
		t.Fatal("settle after its context ended returned true")
	}
}

// TestAnswersElected: a proxy whose pool is fixed by flags answers as an
// elected relay only if its pool asks replicas, never relays.
func TestAnswersElected(t *testing.T) {
	for _, c := range []struct {
		what string
		d    config.Database
		want bool
	}{
		{"replicas only", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Replicas: []string{"r:1"}}, true},
		{"relays and replicas", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Relays: []string{"x:1"}, Replicas: []string{"r:1"}}, false},
		{"relays only", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Relays: []string{"x:1"}}, false},
		{"neither (its pool is the overlay's)", config.Database{Role: "proxy", Discover: true}, false},
		{"a replica", config.Database{Upstream: []string{"u:1"}, Replicas: []string{"r:1"}}, false},
	} {
		if got := answersElected(c.d); got != c.want {
			t.Errorf("%s: answersElected = %v, want %v", c.what, got, c.want)
		}
	}
}

// TestAdvertisedRole: a proxy that names its relays advertises itself
// their client, elected or not, so that no election picks it; any other
// proxy advertises role relay while elected.
func TestAdvertisedRole(t *testing.T) {
	for _, c := range []struct {
		what    string
		d       config.Database
		elected bool
		want    discovery.Role
	}{
		{"a root", config.Database{}, true, discovery.RoleRoot},
		{"a replica", config.Database{Upstream: []string{"u:1"}}, true, discovery.RoleReplica},
		{"a discovering proxy", config.Database{Role: "proxy", Discover: true}, false, discovery.RoleProxy},
		{"a discovering proxy elected", config.Database{Role: "proxy", Discover: true}, true, discovery.RoleRelay},
		{"replicas only, elected", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Replicas: []string{"r:1"}}, true, discovery.RoleRelay},
		{"a configured relay", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Replicas: []string{"r:1"}, Relay: true}, false, discovery.RoleProxy},
		{"relays only", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Relays: []string{"x:1"}}, false, discovery.RoleRelayClient},
		{"relays only, elected", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Relays: []string{"x:1"}}, true, discovery.RoleRelayClient},
		{"relays and replicas, elected", config.Database{Role: "proxy", Upstream: []string{"u:1"}, Relays: []string{"x:1"}, Replicas: []string{"r:1"}}, true, discovery.RoleRelayClient},
	} {
		if got := advertisedRole(c.d, func() bool { return c.elected }); got != c.want {
			t.Errorf("%s: advertisedRole = %v, want %v", c.what, got, c.want)
		}
	}
}
