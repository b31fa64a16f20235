package raftroot

import (
	"fmt"
	"testing"
	"time"
)

// A member whose wall clock is a day ahead, proposing the writes (its
// first proposal after it started, as a new leader's first heartbeat
// is), dates them by the real time elapsed on its clock: the log's clock
// stays within the proposal step of the others' time instead of moving
// the step further with every entry.
func TestSimLeaderClockAheadIsBounded(t *testing.T) {
	var c *simCluster
	c = newSimClusterStopped(t, 3, 21, func(cfg *Config) {
		if cfg.NodeID == 1 {
			cfg.Now = func() time.Time { return c.clock.Now().Add(24 * time.Hour) }
		}
	})
	for _, id := range c.ids() {
		c.start(id)
	}
	ahead := c.members[1]
	c.mustWrite(c.members[2], "before", "x") // dated by member 2's clock
	start, began := c.members[2].st.AppliedTime(), c.clock.Now()
	const writes = 20
	for i := range writes {
		c.mustWrite(ahead, fmt.Sprintf("k%d", i), "v")
		c.tick(1)
	}
	c.converge()
	elapsed := c.clock.Since(began)
	limit := start.Add(elapsed + elapsed/16 + 30*time.Second)
	for _, m := range c.running() {
		if got := m.st.AppliedTime(); got.After(limit) {
			t.Errorf("member %d: log dated %v past the time before %d writes from a clock a day ahead, want at most %v",
				m.id, got.Sub(start), writes, limit.Sub(start))
		}
	}
}

// A member restarted with its wall clock a day ahead, leading, dates its
// heartbeats from the log's time and the real time since: a minute of
// heartbeats moves the log's clock about a minute, not 30 s with each.
func TestSimLeaderHeartbeatsAfterRestartClockAhead(t *testing.T) {
	var c *simCluster
	var skew time.Duration
	c = newSimClusterStopped(t, 1, 22, func(cfg *Config) {
		cfg.Heartbeat = time.Second
		cfg.Now = func() time.Time { return c.clock.Now().Add(skew) }
	})
	m := c.start(1)
	c.leader()
	c.tick(30)
	if m.st.AppliedIndex() == 0 {
		t.Fatal("no heartbeat before the restart")
	}
	m.stop()
	skew = 24 * time.Hour
	m = c.start(1)
	c.leader()
	start, began, first := m.st.AppliedTime(), c.clock.Now(), m.st.AppliedIndex()
	c.tick(600) // a minute
	elapsed := c.clock.Since(began)
	if got, limit := m.st.AppliedTime().Sub(start), elapsed+elapsed/16+30*time.Second; got > limit {
		t.Fatalf("%d heartbeats in a minute after a restart with the clock a day ahead moved the log's clock %v, want at most %v",
			m.st.AppliedIndex()-first, got, limit)
	}
	if m.st.AppliedIndex() < first+30 {
		t.Fatalf("%d heartbeats in a minute", m.st.AppliedIndex()-first)
	}
}
