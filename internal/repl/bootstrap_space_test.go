package repl

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/store"
)

// smallDisk is the real filesystem with a small disk's free space: avail
// says how much, given the bytes of the snapshot received so far (the
// staging directory's size).
type smallDisk struct {
	vfs.FS
	staging string
	avail   atomic.Pointer[func(received uint64) uint64]
}

func (d *smallDisk) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	var received uint64
	if ents, err := os.ReadDir(d.staging); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && e.Name() != stateFile {
				received += uint64(fi.Size())
			}
		}
	}
	return vfs.DiskUsage{AvailBytes: (*d.avail.Load())(received), TotalBytes: 1 << 40}, nil
}

func (d *smallDisk) setAvail(f func(received uint64) uint64) { d.avail.Store(&f) }

// A snapshot that does not fit above the replica's free-space reserve is
// refused before a byte is downloaded, with a clear error wrapping
// ErrDiskFull, counted, and the store's disk-full gauge set; space that
// runs out during the download (another process took it) stops it the
// same way. Nothing is installed and the replica's data is intact; with
// space back the bootstrap completes.
func TestBootstrapOnASmallDisk(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), nil)
	fill(t, root, "a", 3000, 4000) // some MiB: several files, chunks past a writeback step
	const reserve = 1 << 20
	dir := t.TempDir()
	disk := &smallDisk{FS: vfs.Default, staging: store.StagingDir(dir)}
	disk.setAvail(func(uint64) uint64 { return 1 << 40 })
	rep, err := store.Open(store.Options{Name: name, Dir: dir, FS: disk, DBID: root.DBID(), MinFreeBytes: reserve, BallastBytes: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	r, err := NewReplica(ReplicaConfig{Database: name, Sources: []string{addr}, BootstrapLock: lockPath(t), ProcessID: NewProcessID()}, rep, quiet)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := digest(t, rep)
	ctx := context.Background()

	// Room for the reserve and a little more, not for the snapshot.
	disk.setAvail(func(received uint64) uint64 { return reserve + 64<<10 - min(received, reserve) })
	failed := bootstrapsOf(name, "failed")
	err = r.Bootstrap(ctx, addr, 0)
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("bootstrap on a disk without room for the snapshot: %v, want %v", err, store.ErrDiskFull)
	}
	t.Logf("refused: %v", err)
	if errorKind(err) != kindDiskFull || bootstrapsOf(name, "failed") != failed+1 {
		t.Fatalf("error kind %q, failed bootstraps %v → %v", errorKind(err), failed, bootstrapsOf(name, "failed"))
	}
	if !rep.DiskFull() {
		t.Fatal("the store does not report the disk full")
	}
	if n := receivedBytes(t, disk.staging); n != 0 {
		t.Fatalf("%d bytes of the snapshot downloaded before the refusal", n)
	}
	if after, _ := digest(t, rep); after != before {
		t.Fatal("the replica's data changed")
	}

	// Room at the start, taken by another process once 2 MiB arrived.
	disk.setAvail(func(received uint64) uint64 {
		if received >= 2<<20 {
			return reserve / 2
		}
		return 1 << 40
	})
	err = r.Bootstrap(ctx, addr, 0)
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("bootstrap with the space taken during the download: %v, want %v", err, store.ErrDiskFull)
	}
	if n := receivedBytes(t, disk.staging); n == 0 || n > 8<<20 {
		t.Fatalf("%d bytes downloaded before the download stopped: want some, at most a few MiB past the point space ran out", n)
	}
	if after, _ := digest(t, rep); after != before {
		t.Fatal("the replica's data changed")
	}

	// Space back: the bootstrap resumes and installs.
	disk.setAvail(func(uint64) uint64 { return 1 << 40 })
	if err := r.Bootstrap(ctx, addr, 0); err != nil {
		t.Fatal(err)
	}
	assertSame(t, rep, root)
}

// receivedBytes is the size of the snapshot files in the staging
// directory (0 if there is none).
func receivedBytes(t *testing.T, staging string) uint64 {
	t.Helper()
	ents, err := os.ReadDir(staging)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && e.Name() != stateFile {
			n += uint64(fi.Size())
		}
	}
	return n
}
