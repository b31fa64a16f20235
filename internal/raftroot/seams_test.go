package raftroot

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A proposal timeout on a manual clock ends when the clock passes it, with
// context.DeadlineExceeded, and not before; cancelling it, or its parent,
// ends it with context.Canceled.
func TestWithTimeoutOnManualClock(t *testing.T) {
	clock := clockwork.NewFakeClock()
	ctx, cancel := withTimeout(context.Background(), clock, time.Second)
	defer cancel()
	if err := ctx.Err(); err != nil {
		t.Fatalf("new context: %v", err)
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("deadline %v %v, want %v", d, ok, clock.Now().Add(time.Second))
	}
	clock.Advance(time.Second - time.Nanosecond)
	select {
	case <-ctx.Done():
		t.Fatalf("ended before its deadline: %v", ctx.Err())
	default:
	}
	clock.Advance(time.Nanosecond)
	select {
	case <-ctx.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("not ended 60s after the manual clock passed its deadline")
	}
	if err := ctx.Err(); err != context.DeadlineExceeded {
		t.Fatalf("ended with %v, want context.DeadlineExceeded", err)
	}

	ctx, cancel = withTimeout(context.Background(), clock, time.Second)
	cancel()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel = withTimeout(parent, clock, time.Second)
	defer cancel()
	cancelParent()
	<-ctx.Done()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("parent cancelled: %v", err)
	}
	// An earlier deadline of the parent is the context's.
	parent, cancelParent = withTimeout(context.Background(), clock, time.Millisecond)
	defer cancelParent()
	ctx, cancel = withTimeout(parent, clock, time.Second)
	defer cancel()
	if d, _ := ctx.Deadline(); !d.Equal(clock.Now().Add(time.Millisecond)) {
		t.Fatalf("deadline %v, want the parent's %v", d, clock.Now().Add(time.Millisecond))
	}
}

// The leader proposes a heartbeat entry once nothing was written for the
// heartbeat interval on its clock, not before, stamped with its clock's
// time.
func TestHeartbeatOnTheClock(t *testing.T) {
	c := newSimCluster(t, 3, 31, func(cfg *Config) { cfg.Heartbeat = time.Second })
	lead := c.leader()
	c.mustWrite(lead, "k", "v")
	h0 := c.converge()
	written := lead.st.AppliedTime()
	for c.clock.Now().Add(simTick).Before(written.Add(time.Second)) {
		c.tick(1)
		if h, _ := lead.st.Head(); h.Index != h0.Index {
			t.Fatalf("entry %d written %v after the last write; heartbeat interval 1s", h.Index, c.clock.Since(written))
		}
	}
	c.tick(2)
	h1 := c.converge()
	if h1.Index != h0.Index+1 {
		t.Fatalf("head %d after the heartbeat interval, want %d (one heartbeat)", h1.Index, h0.Index+1)
	}
	if at := lead.st.AppliedTime(); at.Before(written.Add(time.Second)) || at.After(c.clock.Now()) {
		t.Fatalf("heartbeat at %v: not on the member's clock (last write %v, now %v)", at, written, c.clock.Now())
	}
}
