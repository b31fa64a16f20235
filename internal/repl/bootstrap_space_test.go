package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
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
			if fi, err := e.Info(); err == nil && e.Name() != store.BootstrapRecord {
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
	r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Database: name, Sources: []string{addr}, BootstrapLock: lockPath(t), ProcessID: NewProcessID()}, rep, quiet)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := digest(t, rep)
	ctx := context.Background()

	// Room for the reserve and a little more, not for the snapshot.
	disk.setAvail(func(received uint64) uint64 { return reserve + 64<<10 - min(received, reserve) })
	failed := bootstrapsOf(t, name, "failed")
	err = r.Bootstrap(ctx, addr, 0)
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("bootstrap on a disk without room for the snapshot: %v, want %v", err, store.ErrDiskFull)
	}
	t.Logf("refused: %v", err)
	if errorKind(err) != kindDiskFull || bootstrapsOf(t, name, "failed") != failed+1 {
		t.Fatalf("error kind %q, failed bootstraps %v → %v", errorKind(err), failed, bootstrapsOf(t, name, "failed"))
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
		if fi, err := e.Info(); err == nil && e.Name() != store.BootstrapRecord {
			n += uint64(fi.Size())
		}
	}
	return n
}

// tableCuttingProxy forwards connections to target. It reads the first
// bootstrap's manifest as it passes and cuts that connection right after
// the first table (.sst) that is not the snapshot's last file is
// complete: the cut always falls inside the snapshot actually sent, with a
// table done and more to come. Later connections pass whole.
func tableCuttingProxy(t *testing.T, target string) (addr string, cut func() bool) {
	ln := listen(t)
	var did atomic.Bool
	serveConns(t, ln, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { io.Copy(up, c); up.Close() }()
		if did.Load() {
			io.Copy(c, up)
			return
		}
		// Every byte read from up is written to c as it is read, frame by
		// frame; nothing is held back.
		tee := io.TeeReader(up, c)
		table := -1
		for {
			typ, p, err := ReadFrame(tee)
			if err != nil {
				return
			}
			m, err := DecodePayload(typ, p)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *Snapshot:
				for i, f := range m.Files[:max(len(m.Files)-1, 0)] {
					if strings.HasSuffix(f.Name, ".sst") && f.Size > 0 {
						table = i
						break
					}
				}
				if table < 0 {
					t.Errorf("the snapshot has no table before its last file: %+v", m.Files)
					return
				}
			case *FileEnd:
				if int(m.File) == table {
					did.Store(true)
					return // closes c: the cut
				}
			}
		}
	})
	return ln.Addr().String(), did.Load
}

// A resumed bootstrap checks the files an earlier session completed
// before it counts them: one damaged on disk since (here: a flipped byte)
// is received again, counted, and what is installed is the source's data,
// not the damage.
func TestBootstrapResumeChecksCompletedFiles(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	src := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.ChunkBytes = 64 << 10 })
	fill(t, root, "b", 6000, 1000)
	if err := root.Compact(); err != nil { // the data in tables
		t.Fatal(err)
	}
	// The source's tables, to compare the installed ones with.
	cp := filepath.Join(t.TempDir(), "source")
	if _, err := root.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	addr, cut := tableCuttingProxy(t, src)

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Database: name, Sources: []string{src}, BootstrapLock: lockPath(t), ProcessID: NewProcessID()}, rep, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Bootstrap(ctx, addr, 0); err == nil || !cut() {
		t.Fatalf("bootstrap through a proxy cutting it: %v (cut %v)", err, cut())
	}
	staging := store.StagingDir(rep.Options().Dir)
	b, err := os.ReadFile(filepath.Join(staging, store.BootstrapRecord))
	if err != nil {
		t.Fatal(err)
	}
	// The record's format on disk (store.BootstrapRecord).
	var st struct {
		Files []struct {
			Name string `json:"name"`
			Size uint64 `json:"size"`
		} `json:"files"`
		Done int `json:"done"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	// Damage the largest table recorded complete (a table's damage shows
	// in reads, where a log's tail would only be cut).
	big := -1
	for i, f := range st.Files[:st.Done] {
		if strings.HasSuffix(f.Name, ".sst") && (big < 0 || f.Size > st.Files[big].Size) {
			big = i
		}
	}
	if big < 0 || st.Files[big].Size == 0 {
		t.Fatalf("no complete table to damage after the cut (%d of %d done)", st.Done, len(st.Files))
	}
	t.Logf("damaging %s (%d bytes), %d of %d files done", st.Files[big].Name, st.Files[big].Size, st.Done, len(st.Files))
	path := filepath.Join(staging, st.Files[big].Name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	crcErrors := errCount(t, name, kindCRC)
	received := value(metricsOf(t).bootstrapBytes.WithLabelValues(name))
	if err := r.Bootstrap(ctx, src, 0); err != nil {
		t.Fatal(err)
	}
	if got := value(metricsOf(t).bootstrapBytes.WithLabelValues(name)) - received; got < float64(st.Files[big].Size) {
		t.Fatalf("resumed bootstrap received %v bytes: not the damaged file (%d bytes) again", got, st.Files[big].Size)
	}
	// The same immutable file, in a checkpoint of the source: the one
	// installed must be the source's bytes, not the damaged copy.
	if want, err := os.ReadFile(filepath.Join(cp, st.Files[big].Name)); err == nil {
		if got, err := os.ReadFile(filepath.Join(rep.Options().Dir, st.Files[big].Name)); err == nil && !bytes.Equal(got, want) {
			t.Fatalf("installed %s differs from the source's", st.Files[big].Name)
		}
	}
	if err := mustVerifyStore(t, rep); err != nil {
		t.Fatal(err)
	}
	assertSame(t, rep, root)
	if errCount(t, name, kindCRC) != crcErrors+1 {
		t.Fatalf("damaged file not counted: crc errors %v → %v", crcErrors, errCount(t, name, kindCRC))
	}
}

// A replica whose store is on a memory filesystem bootstraps there: the
// download, its record, the ready snapshot and the install all go
// through the store's filesystem, and nothing is written on the real disk
// where the store's directory would be.
func TestBootstrapIntoAMemoryStore(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.ChunkBytes = 64 << 10 })
	fill(t, root, "m", 1500, 1000)
	real := t.TempDir()
	rep, err := store.Open(store.Options{Name: name, Dir: filepath.Join(real, "replica"), FS: vfs.NewMem(), DBID: root.DBID(),
		MinFreeBytes: 1, BallastBytes: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close() })
	r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Database: name, Sources: []string{addr}, BootstrapLock: lockPath(t), ProcessID: NewProcessID()}, rep, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bootstrap(context.Background(), addr, 0); err != nil {
		t.Fatal(err)
	}
	assertSame(t, rep, root)
	if err := mustVerifyStore(t, rep); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("written on the real disk: %s", e.Name())
	}
}
