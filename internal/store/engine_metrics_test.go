package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The snapshot carries the engine's own metrics and the disk's space
// while the store is open, and leaves them out once it is closed.
func TestMetricsEngineAndDisk(t *testing.T) {
	t.Parallel()
	s, err := Open(Options{Name: "engine-disk", Dir: t.TempDir(), MinFreeBytes: 12345, BallastBytes: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i), pattern(i, 4<<10)))
	}
	m := s.Metrics()
	if m.Engine == nil || m.Engine.WAL.BytesWritten == 0 {
		t.Fatalf("engine metrics of an open store after 20 writes: %+v", m.Engine)
	}
	if !m.DiskOK || m.Disk.ReserveBytes != 12345 || m.Disk.TotalBytes == 0 || m.Disk.AvailBytes == 0 || m.Disk.AvailBytes > m.Disk.TotalBytes {
		t.Fatalf("disk space %+v (read: %v)", m.Disk, m.DiskOK)
	}
	if m.Name != "engine-disk" || m.Entries != 20 || m.AppliedIndex < 20 || m.AppliedTime.IsZero() {
		t.Fatalf("store metrics: name %q, %v entries, applied %v at %v", m.Name, m.Entries, m.AppliedIndex, m.AppliedTime)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m = s.Metrics()
	if m.Engine != nil || m.DiskOK {
		t.Fatal("a closed store's snapshot reads its engine or disk")
	}
	if m.Entries != 20 {
		t.Fatalf("a closed store's snapshot lost its counters: %v entries", m.Entries)
	}
}

func TestWriteStallMetrics(t *testing.T) {
	t.Parallel()
	m := newStoreMetrics()
	l := stallListener(m)
	l.WriteStallEnd() // an end without a begin counts nothing
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	l.WriteStallEnd()
	if n := m.writeStalls.value(); n != 1 {
		t.Errorf("stalls %g, want 1", n)
	}
	if v := m.writeStallSeconds.value(); v <= 0 {
		t.Errorf("stall seconds %g", v)
	}
}

// noUsageFS cannot tell the space of its disk.
type noUsageFS struct{ vfs.FS }

func (noUsageFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{}, errors.New("statfs: input/output error")
}

// A disk whose space cannot be read leaves the disk's figures out of the
// snapshot (none is reported as 0 bytes free), and only them: the engine's
// are there, and writes go on.
func TestMetricsDiskSpaceUnreadable(t *testing.T) {
	t.Parallel()
	s, err := Open(Options{Dir: t.TempDir(), FS: noUsageFS{vfs.Default}, MinFreeBytes: 12345, BallastBytes: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustWrite(t, s, setb("k", pattern(1, 100)))
	m := s.Metrics()
	if m.DiskOK || m.Disk != (DiskSpace{}) {
		t.Fatalf("disk space %+v (read: %v) from a disk that cannot tell it", m.Disk, m.DiskOK)
	}
	if m.Engine == nil || m.Entries != 1 || m.DiskFull != 0 {
		t.Fatalf("engine %v, %v entries, disk full %v", m.Engine != nil, m.Entries, m.DiskFull)
	}
}
