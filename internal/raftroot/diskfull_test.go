package raftroot

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/store"
)

// freeFS reports a settable amount of free disk space.
type freeFS struct {
	vfs.FS
	free atomic.Uint64
}

func (f *freeFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{AvailBytes: f.free.Load(), TotalBytes: 1 << 40}, nil
}

// A member whose disk is below its free-space reserve refuses a write at
// once with ErrDiskFull (HTTP 507), before proposing it: proposed, the
// write would wait while the member retried its apply, and be answered
// "outcome unknown" (HTTP 504) when the proposal timeout passed. Nothing
// is applied anywhere, the store reports itself full, and once space
// returns writes go through again.
func TestWriteOnFullDiskRefusedBeforeProposal(t *testing.T) {
	c := newSimClusterStopped(t, 3, 31, nil)
	disks := map[uint64]*freeFS{}
	c.storeTweak = func(id uint64, o *store.Options) {
		d := &freeFS{FS: o.FS}
		d.free.Store(1 << 40)
		disks[id] = d
		o.FS, o.MinFreeBytes = d, 64<<20
	}
	for _, id := range c.ids() {
		c.start(id)
	}
	lead := c.leader()
	c.mustWrite(lead, "before", "v")
	c.converge()
	for _, m := range []*simMember{lead, c.others(lead)[0]} {
		disks[m.id].free.Store(1 << 20)
		before := counter(t, c.metrics.proposals, "db", "failed")
		a := c.awaitTicking(c.write(m, put("full", "v")))
		if !errors.Is(a.err, store.ErrDiskFull) {
			t.Fatalf("member %d (leader %v) on a full disk answered %v, want %v", m.id, m == lead, a.err, store.ErrDiskFull)
		}
		if errors.Is(a.err, store.ErrUnavailable) || errors.Is(a.err, context.DeadlineExceeded) {
			t.Fatalf("disk-full answer also says unavailable or timeout: %v", a.err)
		}
		if after := counter(t, c.metrics.proposals, "db", "failed"); after != before+1 {
			t.Fatalf("proposals_total{outcome=failed} %v → %v", before, after)
		}
		if !m.st.DiskFull() {
			t.Fatalf("member %d refused a write for lack of space but does not report itself full", m.id)
		}
		c.tick(5)
		for _, o := range c.running() {
			if _, ok := lookup(t, o.st, "full"); ok {
				t.Fatalf("member %d applied a write refused for a full disk", o.id)
			}
		}
		disks[m.id].free.Store(1 << 40)
		c.mustWrite(m, "after-"+string(rune('0'+m.id)), "v")
		if m.st.DiskFull() {
			t.Fatalf("member %d still reports a full disk after a write with space back", m.id)
		}
	}
	c.converge()
}
