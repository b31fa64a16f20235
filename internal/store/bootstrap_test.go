package store

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// bytesBody is a file body read from memory, with its CRC-32C (or a
// wrong one).
type bytesBody struct {
	*bytes.Reader
	crc uint32
}

func (b bytesBody) SourceCRC() uint32 { return b.crc }

// snapshotSource is a checkpoint of a root on fs, as a source sends it.
type snapshotSource struct {
	man  SnapshotManifest
	data [][]byte
	head Head
	hash [32]byte
}

func checkpointSource(t *testing.T, root *Store, fs vfs.FS, dir string) *snapshotSource {
	t.Helper()
	h, err := root.Checkpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := digest(t, root)
	src := &snapshotSource{man: SnapshotManifest{Source: "test", Snapshot: "00112233445566778899aabbccddeeff", Index: h.Index}, head: h, hash: hash}
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == "LOCK" { // Pebble's, as a source leaves it out
			continue
		}
		b, err := readFile(fs, fs.PathJoin(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		src.man.Files = append(src.man.Files, SnapshotFile{Name: n, Size: uint64(len(b))})
		src.data = append(src.data, b)
	}
	return src
}

func (src *snapshotSource) body(i int, off uint64) bytesBody {
	return bytesBody{bytes.NewReader(src.data[i][off:]), crc32.Checksum(src.data[i], crcTable)}
}

// receiveAll runs a whole bootstrap session into s from src.
func receiveAll(t *testing.T, s *Store, src *snapshotSource) error {
	t.Helper()
	b := s.OpenBootstrap(BootstrapHooks{})
	at, err := b.Begin(src.man)
	if err != nil {
		return err
	}
	for i := at.File; i < len(src.data); i++ {
		off := uint64(0)
		if i == at.File {
			off = at.Offset
		}
		if err := b.Receive(i, off, src.body(i, off)); err != nil {
			return errors.Join(err, b.Finish())
		}
	}
	return b.Install(context.Background())
}

// A bootstrap into a store on a memory filesystem writes only there: the
// download, the record, the ready snapshot and the install, nothing on
// the real disk under the store's directory.
func TestBootstrapStaysOnTheStoresFilesystem(t *testing.T) {
	root := openTest(t, Options{})
	rootHistory(t, root, 30)
	mem := vfs.NewMem()
	src := checkpointSource(t, root, vfs.Default, t.TempDir()+"/cp")
	real := t.TempDir()
	dir := real + "/replica"
	rep := openTest(t, Options{Dir: dir, FS: mem, DBID: root.DBID()})
	if err := receiveAll(t, rep, src); err != nil {
		t.Fatal(err)
	}
	if rep.AppliedIndex() != src.head.Index {
		t.Fatalf("applied %d after the install, want %d", rep.AppliedIndex(), src.head.Index)
	}
	if got, _ := digest(t, rep); got != src.hash {
		t.Fatal("installed data differs from the source's")
	}
	mustVerify(t, rep)
	ents, err := os.ReadDir(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("written on the real disk: %s", e.Name())
	}
}

// A download resumes from the bytes on disk: files recorded complete are
// checked again (one damaged since is received again, reported), the
// file in progress goes on from its last byte; a body whose CRC is not
// the source's is refused, counted as ErrSnapshotCRC, and the file is
// received again from its start; bad manifests are refused before
// anything is written.
func TestBootstrapResumeAndBadInput(t *testing.T) {
	root := openTest(t, Options{})
	rootHistory(t, root, 60)
	if err := root.Compact(); err != nil {
		t.Fatal(err)
	}
	mem := vfs.NewMem()
	src := checkpointSource(t, root, vfs.Default, t.TempDir()+"/cp")
	if len(src.data) < 3 {
		t.Fatalf("checkpoint of %d files: want at least 3", len(src.data))
	}
	rep := openTest(t, Options{Dir: "/db", FS: mem, DBID: root.DBID()})
	before, _ := digest(t, rep)

	for _, bad := range []string{"../escape", "/abs", BootstrapRecord, "a/b", "", "LOCK"} {
		m := src.man
		m.Files = append([]SnapshotFile{{Name: bad, Size: 1}}, m.Files...)
		if _, err := rep.OpenBootstrap(BootstrapHooks{}).Begin(m); !errors.Is(err, ErrInvalid) {
			t.Fatalf("manifest with file %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := mem.Stat(StagingDir("/db")); err == nil {
		t.Fatal("a refused manifest left a staging directory")
	}

	// First session: two files complete, half of the third, then a body
	// with a wrong CRC.
	b := rep.OpenBootstrap(BootstrapHooks{})
	if _, err := b.Begin(src.man); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := b.Receive(i, 0, src.body(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	half := len(src.data[2]) / 2
	cut := bytesBody{bytes.NewReader(src.data[2][:half]), 0}
	if err := b.Receive(2, 0, cut); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a file cut short: %v, want ErrInvalid", err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	// What a broken connection leaves: the first half of file 2 on disk.
	f, err := mem.OpenReadWrite(mem.PathJoin(StagingDir("/db"), src.man.Files[2].Name), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(src.data[2][:half], 0)
	f.Close()

	// Damage file 0 since.
	p0 := mem.PathJoin(StagingDir("/db"), src.man.Files[0].Name)
	data, _ := readFile(mem, p0)
	data[len(data)/2] ^= 1
	f, _ = mem.Create(p0, vfs.WriteCategoryUnspecified)
	f.Write(data)
	f.Close()

	var damaged []string
	b = rep.OpenBootstrap(BootstrapHooks{Damaged: func(name string, err error) { damaged = append(damaged, name) }})
	if r := b.Resume(); r.Snapshot != src.man.Snapshot || r.File != 0 || r.Offset != 0 {
		t.Fatalf("resume after damage to file 0: %+v, want file 0 at 0", r)
	}
	if len(damaged) != 1 || damaged[0] != src.man.Files[0].Name {
		t.Fatalf("damaged files reported: %v", damaged)
	}
	at, err := b.Begin(src.man)
	if err != nil {
		t.Fatal(err)
	}
	// File 0 again, then file 1 with a wrong CRC.
	if err := b.Receive(0, at.Offset, src.body(0, at.Offset)); err != nil {
		t.Fatal(err)
	}
	wrong := src.body(1, 0)
	wrong.crc ^= 1
	if err := b.Receive(1, 0, wrong); !errors.Is(err, ErrSnapshotCRC) {
		t.Fatalf("a file with a wrong CRC: %v, want ErrSnapshotCRC", err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	if after, _ := digest(t, rep); after != before {
		t.Fatal("the replica's data changed before the install")
	}

	// The last session resumes at file 1 from its start, and installs.
	b = rep.OpenBootstrap(BootstrapHooks{})
	if r := b.Resume(); r.File != 1 || r.Offset != 0 {
		t.Fatalf("resume after a CRC failure of file 1: %+v", r)
	}
	b.Finish()
	if err := receiveAll(t, rep, src); err != nil {
		t.Fatal(err)
	}
	if got, _ := digest(t, rep); got != src.hash || rep.AppliedIndex() != src.head.Index {
		t.Fatal("installed snapshot differs from the source's")
	}
	mustVerify(t, rep)
}

// A crash at every step of a bootstrap (each change to the filesystem:
// the download, the record, the ready snapshot, the swap, the removal of
// the old database), with any part of what was not synced lost, leaves
// the old database or the new one, whole and clean, never a mix; a
// partial download is resumed and installed after.
func TestBootstrapCrashAtEveryStep(t *testing.T) {
	mem := vfs.NewCrashableMem()
	root := openTest(t, Options{Dir: "/root", FS: mem})
	rootHistory(t, root, 40)
	src := checkpointSource(t, root, mem, "/cp")

	var (
		mu     sync.Mutex
		armed  bool
		images []*vfs.MemFS
	)
	rng := rand.New(rand.NewPCG(7, 11))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if armed {
			images = append(images, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: []int{0, 50, 100}[len(images)%3], RNG: rng}))
		}
		return nil
	})
	o := Options{Name: "replica", Dir: "/data/db", FS: errorfs.Wrap(mem, inj), DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()}
	rep, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	es, err := root.ReadLog(1, 3, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Apply(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	old, _ := digest(t, rep)
	oldIndex := rep.AppliedIndex()
	mu.Lock()
	armed = true
	mu.Unlock()
	err = receiveAll(t, rep, src)
	mu.Lock()
	armed = false
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	rep.Close()
	t.Logf("%d crash images", len(images))
	if len(images) < 10 {
		t.Fatalf("only %d crash images of a bootstrap", len(images))
	}
	var olds, news int
	for n, img := range images {
		s, err := Open(Options{Name: "replica", Dir: "/data/db", FS: img, DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("image %d: open: %v", n, err)
		}
		got, _ := digest(t, s)
		switch {
		case s.AppliedIndex() == oldIndex && got == old:
			olds++
		case s.AppliedIndex() == src.head.Index && got == src.hash:
			news++
		default:
			s.Close()
			t.Fatalf("image %d: applied %d: neither the old database (%d) nor the new one (%d)", n, s.AppliedIndex(), oldIndex, src.head.Index)
		}
		mustVerify(t, s)
		if s.AppliedIndex() == oldIndex && n%5 == 0 {
			// The partial download goes on and installs.
			if err := receiveAll(t, s, src); err != nil {
				t.Fatalf("image %d: bootstrap after the crash: %v", n, err)
			}
			if got, _ := digest(t, s); got != src.hash {
				t.Fatalf("image %d: bootstrap after the crash installed other data", n)
			}
		}
		s.Close()
	}
	if olds == 0 || news == 0 {
		t.Fatalf("%d images with the old database, %d with the new: want both", olds, news)
	}
	t.Logf("%d images with the old database, %d with the new", olds, news)
}
