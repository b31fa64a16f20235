package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// bytesBody is a file body read from memory, with its CRC-32C (or a
// wrong one), in reads of at most 4 KiB as chunks arrive.
type bytesBody struct {
	*bytes.Reader
	crc uint32
}

func (b bytesBody) SourceCRC() uint32 { return b.crc }

func (b bytesBody) Read(p []byte) (int, error) { return b.Reader.Read(p[:min(len(p), 4<<10)]) }

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
	_, err := receiveAllEvery(t, s, src, 0, BootstrapHooks{})
	return err
}

// receiveAllEvery runs a whole bootstrap session into s from src,
// recording the prefix of the file in progress every partialEvery bytes
// (0: as a bootstrap does), and returns where it resumed from.
func receiveAllEvery(t *testing.T, s *Store, src *snapshotSource, partialEvery uint64, h BootstrapHooks) (BootstrapResume, error) {
	t.Helper()
	b := s.OpenBootstrap(h)
	if partialEvery > 0 {
		b.partialEvery = partialEvery
	}
	at, err := b.Begin(src.man)
	if err != nil {
		return at, err
	}
	for i := at.File; i < len(src.data); i++ {
		off := uint64(0)
		if i == at.File {
			off = at.Offset
		}
		if err := b.Receive(i, off, src.body(i, off)); err != nil {
			return at, errors.Join(err, b.Finish())
		}
	}
	return at, b.Install(context.Background())
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

// brokenBody is a file body whose stream breaks after its bytes.
type brokenBody struct{ *bytes.Reader }

var errStreamBroke = errors.New("stream broke")

func (b brokenBody) SourceCRC() uint32 { return 0 }

func (b brokenBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p[:min(len(p), 4<<10)])
	if err == io.EOF {
		err = errStreamBroke
	}
	return n, err
}

// A stream that breaks within a file leaves its received prefix synced
// and recorded: the next session goes on from there, whatever follows the
// prefix on disk (never synced, written over); a recorded prefix damaged
// since is reported and the file received from its start.
func TestBootstrapResumesFromTheSyncedPrefix(t *testing.T) {
	root := openTest(t, Options{})
	rootHistory(t, root, 60)
	src := checkpointSource(t, root, vfs.Default, t.TempDir()+"/cp")
	k := 0 // the largest file: cut in its middle
	for i, d := range src.data {
		if len(d) > len(src.data[k]) {
			k = i
		}
	}
	half := uint64(len(src.data[k]) / 2)
	if half < 8<<10 {
		t.Fatalf("largest file of the snapshot has %d bytes: want 16 KiB at least", len(src.data[k]))
	}
	for _, damage := range []bool{false, true} {
		t.Run(fmt.Sprintf("damaged=%v", damage), func(t *testing.T) {
			mem := vfs.NewMem()
			rep := openTest(t, Options{Dir: "/db", FS: mem, DBID: root.DBID()})
			b := rep.OpenBootstrap(BootstrapHooks{})
			if _, err := b.Begin(src.man); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < k; i++ {
				if err := b.Receive(i, 0, src.body(i, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Receive(k, 0, brokenBody{bytes.NewReader(src.data[k][:half])}); !errors.Is(err, errStreamBroke) {
				t.Fatalf("a stream broken within file %d: %v", k, err)
			}
			if err := b.Finish(); err != nil {
				t.Fatal(err)
			}
			// What a power loss may leave after the synced prefix: a
			// block of zeros. And damage within the prefix, for the
			// second run.
			path := mem.PathJoin(StagingDir("/db"), src.man.Files[k].Name)
			f, err := mem.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(make([]byte, 4<<10), int64(half))
			if damage {
				f.WriteAt([]byte{^src.data[k][half/2]}, int64(half/2))
			}
			f.Close()

			var damaged []string
			b = rep.OpenBootstrap(BootstrapHooks{Damaged: func(name string, err error) { damaged = append(damaged, name) }})
			want := BootstrapResume{Snapshot: src.man.Snapshot, File: k, Offset: half}
			var wantDamaged []string
			if damage {
				want.Offset = 0
				wantDamaged = []string{src.man.Files[k].Name}
			}
			for i := 0; i < k; i++ {
				want.OnDisk += src.man.Files[i].Size
			}
			want.OnDisk += want.Offset
			if got := b.Resume(); got != want {
				t.Fatalf("resume: %+v, want %+v", got, want)
			}
			if fmt.Sprint(damaged) != fmt.Sprint(wantDamaged) {
				t.Fatalf("damaged files reported: %v, want %v", damaged, wantDamaged)
			}
			at, err := b.Begin(src.man)
			if err != nil {
				t.Fatal(err)
			}
			for i := at.File; i < len(src.data); i++ {
				off := uint64(0)
				if i == at.File {
					off = at.Offset
				}
				if err := b.Receive(i, off, src.body(i, off)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Install(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got, _ := digest(t, rep); got != src.hash || rep.AppliedIndex() != src.head.Index {
				t.Fatal("installed snapshot differs from the source's")
			}
			mustVerify(t, rep)
		})
	}
}

// A file that fails the source's CRC after part of it was recorded is
// received again from its start, its recorded prefix forgotten (not
// reported as damage).
func TestBootstrapCRCFailureForgetsThePrefix(t *testing.T) {
	root := openTest(t, Options{})
	rootHistory(t, root, 60)
	src := checkpointSource(t, root, vfs.Default, t.TempDir()+"/cp")
	k := 0 // the largest file
	for i, d := range src.data {
		if len(d) > len(src.data[k]) {
			k = i
		}
	}
	if len(src.data[k]) < 16<<10 {
		t.Fatalf("largest file of the snapshot has %d bytes: want 16 KiB at least", len(src.data[k]))
	}
	rep := openTest(t, Options{Dir: "/db", FS: vfs.NewMem(), DBID: root.DBID()})
	b := rep.OpenBootstrap(BootstrapHooks{})
	b.partialEvery = 4 << 10
	if _, err := b.Begin(src.man); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < k; i++ {
		if err := b.Receive(i, 0, src.body(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	wrong := src.body(k, 0)
	wrong.crc ^= 1
	if err := b.Receive(k, 0, wrong); !errors.Is(err, ErrSnapshotCRC) {
		t.Fatalf("a file with a wrong CRC: %v, want ErrSnapshotCRC", err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	var damaged []string
	b = rep.OpenBootstrap(BootstrapHooks{Damaged: func(name string, err error) { damaged = append(damaged, name) }})
	if r := b.Resume(); r.File != k || r.Offset != 0 || len(damaged) > 0 {
		t.Fatalf("resume after a CRC failure of file %d: %+v, damaged %v", k, r, damaged)
	}
	b.Finish()
	if err := receiveAll(t, rep, src); err != nil {
		t.Fatal(err)
	}
	if got, _ := digest(t, rep); got != src.hash {
		t.Fatal("installed snapshot differs from the source's")
	}
}

// A crash at every step of a bootstrap (each change to the filesystem:
// the download, the record, the ready snapshot, the swap, the removal of
// the old database), with any part of what was not synced lost, leaves
// the old database or the new one, whole and clean, never a mix; a
// partial download is resumed from what its record says was synced, and
// installed.
//
// Unsynced directory entries survive an image each on its own, in any
// subset. Pebble itself relies on a directory's entries persisting in the
// order they were made (as journaling filesystems keep them): opening a
// database, it creates a manifest and then the marker naming it with no
// directory sync between, so an image that keeps the marker and drops the
// manifest does not open, bootstrap or not. Images taken at the engine's
// own writes inside the live database directory therefore keep all of
// what was not synced or none of it; those taken at the bootstrap's
// writes (the staging and ready directories, the renames) keep any part.
func TestBootstrapCrashAtEveryStep(t *testing.T) {
	mem := vfs.NewCrashableMem()
	root := openTest(t, Options{Dir: "/root", FS: mem})
	rootHistory(t, root, 40)
	src := checkpointSource(t, root, mem, "/cp")

	const live = "/data/db"
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
		if !armed {
			return nil
		}
		unsynced := []int{0, 50, 100}[len(images)%3]
		if op.Kind != errorfs.OpRename && (op.Path == live || strings.HasPrefix(op.Path, live+"/")) {
			unsynced = []int{0, 100}[len(images)%2]
		}
		images = append(images, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rng}))
		return nil
	})
	o := Options{Name: "replica", Dir: live, FS: errorfs.Wrap(mem, inj), DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()}
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
	// The prefix of the file in progress is recorded every 12 KiB (three
	// of the crashable filesystem's blocks), so that images hold such
	// records, and unsynced bytes after them, some lost and some kept.
	_, err = receiveAllEvery(t, rep, src, 12<<10, BootstrapHooks{})
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
	var olds, news, midFile, afterFiles int
	for n, img := range images {
		s, err := Open(Options{Name: "replica", Dir: live, FS: img, DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()})
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
		if s.AppliedIndex() == oldIndex {
			// The partial download goes on and installs.
			// Nothing recorded was lost: no file, and no prefix, the
			// record counts fails its check.
			var damaged []string
			at, err := receiveAllEvery(t, s, src, 0, BootstrapHooks{Damaged: func(name string, err error) {
				damaged = append(damaged, fmt.Sprintf("%s: %v", name, err))
			}})
			if len(damaged) > 0 {
				s.Close()
				t.Fatalf("image %d: a resumed download found recorded data lost: %v", n, damaged)
			}
			if err != nil {
				s.Close()
				t.Fatalf("image %d: bootstrap after the crash (resumed at file %d, byte %d): %v", n, at.File, at.Offset, err)
			}
			if got, _ := digest(t, s); got != src.hash || s.AppliedIndex() != src.head.Index {
				s.Close()
				t.Fatalf("image %d: bootstrap after the crash installed other data", n)
			}
			mustVerify(t, s)
			if at.Offset > 0 {
				midFile++
			}
			if at.File > 0 {
				afterFiles++
			}
		}
		s.Close()
	}
	if olds == 0 || news == 0 {
		t.Fatalf("%d images with the old database, %d with the new: want both", olds, news)
	}
	if midFile == 0 || afterFiles == 0 {
		t.Fatalf("of %d resumed downloads, %d went on within a file and %d after completed files: want both", olds, midFile, afterFiles)
	}
	t.Logf("%d images with the old database (resumed: %d within a file, %d after completed files), %d with the new", olds, midFile, afterFiles, news)
}

// A partial download of one snapshot does not keep out another the source
// offers instead: the room it holds counts as free, so it is discarded
// and the new snapshot downloaded and installed, where the disk holds the
// new one but not both. Where the new one would not fit even without it,
// the new one is refused (ErrDiskFull) and the partial download kept.
func TestBootstrapNewSnapshotTakesTheRoomOfAPartialOne(t *testing.T) {
	root := openTest(t, Options{})
	rootHistory(t, root, 60)
	if err := root.Compact(); err != nil {
		t.Fatal(err)
	}
	src := checkpointSource(t, root, vfs.Default, t.TempDir()+"/cp")
	if len(src.data) < 2 {
		t.Fatalf("checkpoint of %d files: want at least 2", len(src.data))
	}
	var total uint64
	for _, f := range src.man.Files {
		total += f.Size
	}
	const reserve = 64 << 10
	qfs := newQuotaFS(vfs.NewMem(), 1<<30)
	rep := openTest(t, Options{Dir: "/db", FS: qfs, DBID: root.DBID(), MinFreeBytes: reserve})
	before, _ := digest(t, rep)

	// The first snapshot: all its files but the last.
	b := rep.OpenBootstrap(BootstrapHooks{})
	if _, err := b.Begin(src.man); err != nil {
		t.Fatal(err)
	}
	var staged uint64
	for i := 0; i < len(src.data)-1; i++ {
		if err := b.Receive(i, 0, src.body(i, 0)); err != nil {
			t.Fatal(err)
		}
		staged += src.man.Files[i].Size
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	other := *src
	other.man.Snapshot = "ffeeddccbbaa99887766554433221100"
	used, _ := qfs.usage()

	// Not even without the partial download: refused, and it is kept.
	qfs.setQuota(used + reserve + int64(total-staged)/2)
	_, err := rep.OpenBootstrap(BootstrapHooks{}).Begin(other.man)
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a snapshot that does not fit even without the partial download: %v, want ErrDiskFull", err)
	}
	if r := rep.OpenBootstrap(BootstrapHooks{}).Resume(); r.Snapshot != src.man.Snapshot || r.File != len(src.data)-1 {
		t.Fatalf("partial download after the refusal: %+v, want file %d of %s", r, len(src.data)-1, src.man.Snapshot)
	}

	// Room for the new snapshot once the partial download is gone.
	qfs.setQuota(used + reserve + int64(total-staged/2))
	at, err := receiveAllEvery(t, rep, &other, 0, BootstrapHooks{})
	if err != nil {
		t.Fatalf("a snapshot that fits once the partial download of another is discarded: %v", err)
	}
	if at.Snapshot != other.man.Snapshot || at.File != 0 || at.OnDisk != 0 {
		t.Fatalf("the new snapshot went on from %+v: want its start", at)
	}
	if got, _ := digest(t, rep); got == before || got != src.hash || rep.AppliedIndex() != src.head.Index {
		t.Fatal("installed snapshot differs from the source's")
	}
	mustVerify(t, rep)
}

// roomyDisk is a quotaFS whose free space reads as plenty: its writes
// fail with ENOSPC although every check of the reserve passes, as when
// another process takes the space between two checks.
type roomyDisk struct{ *quotaFS }

func (roomyDisk) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{AvailBytes: 1 << 40, TotalBytes: 1 << 40}, nil
}

// A disk that runs out of space in the middle of a download (ENOSPC past
// the reserve's checks) stops it with an error wrapping ErrDiskFull, as
// the reserve's refusals are, and leaves the replica's data intact; with
// space back the download resumes and installs.
func TestBootstrapDiskFullDuringTheDownload(t *testing.T) {
	root := openTest(t, Options{})
	rootHistory(t, root, 60)
	src := checkpointSource(t, root, vfs.Default, t.TempDir()+"/cp")
	qfs := newQuotaFS(vfs.NewMem(), 1<<30)
	rep := openTest(t, Options{Dir: "/db", FS: roomyDisk{qfs}, DBID: root.DBID()})
	before, _ := digest(t, rep)

	b := rep.OpenBootstrap(BootstrapHooks{})
	if _, err := b.Begin(src.man); err != nil {
		t.Fatal(err)
	}
	used, _ := qfs.usage()
	qfs.setQuota(used + int64(src.man.Files[0].Size)/2)
	t.Cleanup(func() { qfs.setQuota(1 << 30) }) // before the store closes
	err := b.Receive(0, 0, src.body(0, 0))
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write past the end of the disk: %v, want ErrDiskFull wrapping ENOSPC", err)
	}
	b.Finish()
	if after, _ := digest(t, rep); after != before {
		t.Fatal("the replica's data changed")
	}

	qfs.setQuota(1 << 30)
	if err := receiveAll(t, rep, src); err != nil {
		t.Fatal(err)
	}
	if got, _ := digest(t, rep); got != src.hash || rep.AppliedIndex() != src.head.Index {
		t.Fatal("installed snapshot differs from the source's")
	}
	mustVerify(t, rep)
}
