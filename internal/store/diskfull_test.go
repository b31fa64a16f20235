package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func TestQuotaFS(t *testing.T) {
	t.Parallel()
	fs := newQuotaFS(vfs.NewMem(), 100)
	f, err := fs.Create("/a", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.Write(make([]byte, 60)); n != 60 || err != nil {
		t.Fatal(n, err)
	}
	n, err := f.Write(make([]byte, 60))
	if n != 40 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the quota: %d, %v", n, err)
	}
	if du, _ := fs.GetDiskUsage("/"); du.AvailBytes != 0 || du.UsedBytes != 100 {
		t.Fatalf("usage %+v", du)
	}
	f.Close()
	if err := fs.Remove("/a"); err != nil {
		t.Fatal(err)
	}
	if du, _ := fs.GetDiskUsage("/"); du.AvailBytes != 100 {
		t.Fatalf("usage after remove %+v", du)
	}
}

func diskFullEvents(s *Store) float64 { return s.Metrics().DiskFullEvents }

func writeErrors(s *Store, kind string) float64 { return s.Metrics().WriteErrors[kind] }

func ballastSize(t *testing.T, fs vfs.FS, s *Store) int64 {
	t.Helper()
	st, err := fs.Stat(s.ballast)
	if err != nil {
		return -1
	}
	return st.Size()
}

// (a) Free space below the reserve: writes are refused before anything is
// written, reads go on, and writes resume once space returns.
func TestDiskFullReserve(t *testing.T) {
	t.Parallel()
	const db = "diskfull-reserve"
	const reserve, ballast = 1 << 20, 256 << 10
	fs := newQuotaFS(vfs.NewMem(), 1<<30)
	o := Options{Name: db, Dir: "/data/db", FS: fs, MinFreeBytes: reserve, BallastBytes: ballast, Logger: quietLogger()}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := ballastSize(t, fs, s); got != ballast {
		t.Fatalf("ballast of %d bytes at open, want %d", got, ballast)
	}
	mustWrite(t, s, set("a", "1"), setb("big", pattern(1, 300<<10)))
	before, _ := digest(t, s)
	applied := s.AppliedIndex()

	used, _ := fs.usage()
	fs.setQuota(used + reserve/2)
	refused := writeErrors(s, "disk_full")
	for i := 0; i < 3; i++ {
		_, err := writeBatch(context.Background(), s, set("a", "2"))
		if !errors.Is(err, ErrDiskFull) {
			t.Fatalf("write with %d bytes free: %v", reserve/2, err)
		}
	}
	if !s.DiskFull() || writeErrors(s, "disk_full") != refused+3 {
		t.Fatalf("disk full %v, disk_full errors %v -> %v", s.DiskFull(), refused, writeErrors(s, "disk_full"))
	}
	if _, enospc := fs.usage(); enospc != 0 {
		t.Fatalf("the store wrote into the reserve: %d ENOSPC", enospc)
	}
	// Reads keep working and nothing changed.
	if after, _ := digest(t, s); after != before || s.AppliedIndex() != applied {
		t.Fatal("data changed while the disk was full")
	}
	if v, _, _ := get(t, s, "a"); v != "1" {
		t.Fatalf("a = %q", v)
	}

	// Space back: writes resume.
	fs.setQuota(used + 64<<20)
	if r := mustWrite(t, s, set("a", "2")); r.Index != applied+1 {
		t.Fatalf("write after space returned at %d", r.Index)
	}
	if s.DiskFull() {
		t.Fatal("still refusing writes")
	}
	if got := ballastSize(t, fs, s); got != ballast {
		t.Fatalf("ballast %d bytes", got)
	}
	mustVerify(t, s)
}

// (b) The reserve is bypassed and the disk really fills during a commit:
// Pebble's write gets ENOSPC, the ballast is released so that write can
// finish, further writes are refused until space returns, then writes
// resume and the ballast comes back.
func TestDiskFullBallast(t *testing.T) {
	t.Parallel()
	const db = "diskfull-ballast"
	const ballast = 4 << 20
	fs := newQuotaFS(vfs.NewMem(), 1<<30)
	o := Options{Name: db, Dir: "/data/db", FS: fs, MinFreeBytes: 1, BallastBytes: ballast, Logger: quietLogger(), Compression: wal.CompressNone}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := ballastSize(t, fs, s); got != ballast {
		t.Fatalf("ballast of %d bytes at open, want %d", got, ballast)
	}
	mustWrite(t, s, set("a", "1"))
	events := diskFullEvents(s)

	// 64 KiB free; the next write needs about 2 x 256 KiB (the value in
	// the WAL, once as data and once in the log block).
	used, _ := fs.usage()
	fs.setQuota(used + 64<<10)
	value := pattern(7, 256<<10)
	r, err := writeBatch(context.Background(), s, setb("big", value))
	if err != nil {
		t.Fatalf("the write in flight when the disk filled failed: %v", err)
	}
	if _, enospc := fs.usage(); enospc == 0 {
		t.Fatal("the disk never filled: the test did not test anything")
	}
	if got := ballastSize(t, fs, s); got != -1 {
		t.Fatalf("ballast still there (%d bytes)", got)
	}
	if !s.DiskFull() || diskFullEvents(s) != events+1 {
		t.Fatalf("disk full %v, events %v -> %v", s.DiskFull(), events, diskFullEvents(s))
	}
	if v, idx, ok := get(t, s, "big"); !ok || v != string(value) || idx != r.Index {
		t.Fatal("the write in flight was acknowledged but is not readable")
	}

	// Until space returns, writes are refused: the released ballast is not
	// room to write in.
	for i := 0; i < 3; i++ {
		if _, err := writeBatch(context.Background(), s, set("a", "2")); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("write after the ballast was released: %v", err)
		}
	}
	if v, _, _ := get(t, s, "a"); v != "1" {
		t.Fatalf("a = %q", v)
	}

	fs.setQuota(used + 64<<20)
	if r2 := mustWrite(t, s, set("a", "2")); r2.Index != r.Index+1 {
		t.Fatalf("write after space returned at %d, want %d", r2.Index, r.Index+1)
	}
	if s.DiskFull() {
		t.Fatal("still refusing writes")
	}
	if got := ballastSize(t, fs, s); got != ballast {
		t.Fatalf("ballast not recreated: %d bytes", got)
	}
	mustVerify(t, s)

	// Everything acknowledged survives a restart.
	s.Close()
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v, _, _ := get(t, s2, "big"); v != string(value) {
		t.Fatal("big lost after restart")
	}
	mustVerify(t, s2)
}

// TestDiskFullWithoutBallastExits: with no ballast to release, an ENOSPC
// inside Pebble (here its write-ahead log, after the block reached its log
// segment) is fatal, as Pebble cannot tell what reached its WAL: the
// process exits with status 70, and a restart recovers every acknowledged
// write. The write that failed is not acknowledged; its block was durable
// in the segment, so the restart may apply it, whole. The store runs in a
// child process, on a real directory behind the quota, which here spares
// the segments (their own ENOSPC fails the write cleanly:
// TestDiskFullInSegment).
func TestDiskFullWithoutBallastExits(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("QS_TEST_DISKFULL_CHILD"); dir != "" {
		diskFullChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFullWithoutBallastExits$", "-test.count=1")
	cmd.Env = append(os.Environ(), "QS_TEST_DISKFULL_CHILD="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 70 {
		t.Fatalf("child: %v (want exit status 70)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var acked uint64
	for _, line := range strings.Split(stdout.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "acked "); ok {
			acked, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	if acked <= 5 || !strings.Contains(stderr.String(), "no space left on device") {
		t.Fatalf("child did not get as far as ENOSPC:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	s := openTest(t, Options{Dir: dir})
	for i := uint64(1); i <= 5; i++ {
		if v, idx, ok := get(t, s, fmt.Sprintf("k%d", i)); !ok || v != fmt.Sprint(i) || idx != i {
			t.Fatalf("acknowledged k%d lost", i)
		}
	}
	// Batch b is entry 6+b; every acknowledged one is whole, and so is an
	// unacknowledged one whose block reached its segment.
	last := s.AppliedIndex()
	if last < acked {
		t.Fatalf("applied index %d after restart, %d acknowledged", last, acked)
	}
	for idx := uint64(6); idx <= last; idx++ {
		b := int(idx - 6)
		for i := range 1000 {
			if v, at, ok := get(t, s, fmt.Sprintf("spill-%d-%04d", b, i)); !ok || v != string(pattern(b*1000+i, 100)) || at != idx {
				t.Fatalf("entry %d (acknowledged up to %d) not whole: spill-%d-%04d", idx, acked, b, i)
			}
		}
	}
	next := last + 1
	mustVerify(t, s)
	if r := mustWrite(t, s, set("after", "restart")); r.Index != next {
		t.Fatalf("write after restart at %d", r.Index)
	}
}

func diskFullChild(dir string) {
	fs := newQuotaFS(vfs.Default, 1<<40)
	fs.exempt = func(name string) bool { _, ok := parseSegName(fs.PathBase(name)); return ok }
	s, err := Open(Options{Dir: dir, FS: fs, MinFreeBytes: 1, BallastBytes: -1, Compression: wal.CompressNone,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		r, err := writeBatch(ctx, s, set(fmt.Sprintf("k%d", i), fmt.Sprint(i)))
		if err != nil {
			fmt.Println("write:", err)
			os.Exit(1)
		}
		fmt.Printf("acked %d\n", r.Index)
	}
	used, _ := fs.usage()
	fs.setQuota(used + 64<<10)
	// Small values have records of their own in Pebble: 150 kB a batch.
	// Pebble writes its log in the background (the segment is the
	// commit's durability point), so its ENOSPC comes after a batch or
	// two was acknowledged, and ends the process.
	deadline := time.Now().Add(60 * time.Second)
	for b := 0; time.Now().Before(deadline); b++ {
		r, err := writeBatch(ctx, s, spillBatch(b)...)
		if err != nil {
			fmt.Println("the write past the quota returned:", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		fmt.Printf("acked %d\n", r.Index)
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("no fatal error")
	os.Exit(0)
}

// spillBatch is batch b of 1000 small values written past the quota.
func spillBatch(b int) []wal.Op {
	ops := make([]wal.Op, 1000)
	for i := range ops {
		ops[i] = setb(fmt.Sprintf("spill-%d-%04d", b, i), pattern(b*1000+i, 100))
	}
	return ops
}

// TestEngineWritePanics: engineWrite returns f's error, and lets a panic
// that is not an engine error (a bug, or not an error at all) go on; an
// engine error's panic ends the process (TestDiskFullWithoutBallastExits).
func TestEngineWritePanics(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Dir: t.TempDir()})
	want := errors.New("refused")
	if err := s.engineWrite(func() error { return want }); err != want {
		t.Fatalf("error %v", err)
	}
	for _, p := range []any{"not an error", runtimeError()} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("panic %v swallowed", p)
				}
			}()
			s.engineWrite(func() error { panic(p) })
		}()
	}
}

// runtimeError returns the runtime.Error of an index out of range.
func runtimeError() (err any) {
	defer func() { err = recover() }()
	var s []int
	_ = s[len(s)]
	return nil
}

// CheckSpace says, without writing, whether a write would be refused for
// lack of space: below the reserve it reports ErrDiskFull, counts the
// refusal and sets the disk_full gauge; with space back it lets writes
// through, and the next write leaves disk-full mode.
func TestCheckSpace(t *testing.T) {
	t.Parallel()
	fs := &freeFS{FS: vfs.NewMem()}
	fs.free.Store(1 << 30)
	name := dbName(t)
	s := openTest(t, Options{Name: name, Dir: "/db", FS: fs, MinFreeBytes: 64 << 20, Logger: quietLogger()})
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("with room: %v", err)
	}
	fs.free.Store(1 << 20)
	before := writeErrors(s, "disk_full")
	if err := s.CheckSpace(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("below the reserve: %v, want %v", err, ErrDiskFull)
	}
	if got := writeErrors(s, "disk_full"); got != before+1 {
		t.Fatalf("write_errors_total{kind=disk_full} %v → %v", before, got)
	}
	if !s.DiskFull() || s.Metrics().DiskFull != 1 {
		t.Fatalf("below the reserve: DiskFull %v, gauge %v", s.DiskFull(), s.Metrics().DiskFull)
	}
	fs.free.Store(1 << 30)
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("space back: %v", err)
	}
	mustWrite(t, s, set("k", "v"))
	if s.DiskFull() || s.Metrics().DiskFull != 0 {
		t.Fatalf("after a write with space back: DiskFull %v, gauge %v", s.DiskFull(), s.Metrics().DiskFull)
	}
	s.Close()
	if err := s.CheckSpace(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed store: %v", err)
	}
}

// A reserve smaller than a log segment's preallocation: free space is
// above min_free_bytes, but the next segment does not fit. The write
// fails with ErrDiskFull and the store enters disk-full mode (the gauge is
// 1, not 0 while every write fails); later writes are refused before
// touching the disk until the segment fits above the reserve; nothing
// stored changes; then writes resume and the gauge is 0 again.
func TestDiskFullSegmentLargerThanReserve(t *testing.T) {
	t.Parallel()
	const db = "diskfull-segment"
	const reserve = 64 << 10
	// A disk too small for spare segments (two above the reserve), so that
	// the next segment is preallocated, not a spare overwritten.
	fs := newQuotaFS(vfs.NewMem(), 100<<20)
	fs.chargePrealloc = true
	s := openTest(t, Options{Name: db, Dir: "/data/db", FS: fs, MinFreeBytes: reserve, BallastBytes: -1, Logger: quietLogger()})
	mustWrite(t, s, set("a", "1"))
	// Fill the current segment so that the next write needs a new one.
	room := s.segs.rotationBytes()
	for i := 0; s.segs.rotationBytes() == room; i++ {
		if i > 10000 {
			t.Fatal("no segment rotation after 10000 writes")
		}
		mustWrite(t, s, setb(fmt.Sprintf("fill%05d", i), pattern(i, 64<<10)))
	}
	room = s.segs.rotationBytes()
	if room <= 4*reserve {
		t.Fatalf("next segment of %d bytes: not larger than the reserve, the test makes no case", room)
	}
	before, _ := digest(t, s)
	applied := s.AppliedIndex()
	gauge := func() float64 { return s.Metrics().DiskFull }

	used, _ := fs.usage()
	fs.setQuota(used + 4*reserve) // above the reserve, below a segment
	var err error
	for i := 0; i < 1000 && err == nil; i++ { // until the current segment is full
		_, err = writeBatch(context.Background(), s, setb(fmt.Sprintf("more%04d", i), pattern(i, 16<<10)))
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("write needing a new segment with %d bytes free: %v", 4*reserve, err)
	}
	_, enospc := fs.usage()
	if enospc == 0 {
		t.Fatal("the write failed before its segment got ENOSPC; the test makes no case")
	}
	if !s.DiskFull() || gauge() != 1 {
		t.Fatalf("after a segment's ENOSPC: DiskFull %v, gauge %v, want true, 1", s.DiskFull(), gauge())
	}
	before, _ = digest(t, s)
	applied = s.AppliedIndex()
	refused := writeErrors(s, "disk_full")
	for i := 0; i < 3; i++ {
		if _, err := writeBatch(context.Background(), s, set("a", "2")); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("write %d in disk-full mode: %v", i, err)
		}
	}
	if _, again := fs.usage(); again != enospc {
		t.Fatalf("writes in disk-full mode reached the disk: %d more ENOSPC", again-enospc)
	}
	if writeErrors(s, "disk_full") != refused+3 || gauge() != 1 {
		t.Fatalf("disk_full errors %v → %v, gauge %v", refused, writeErrors(s, "disk_full"), gauge())
	}
	if after, _ := digest(t, s); after != before || s.AppliedIndex() != applied {
		t.Fatal("data changed while the disk was full")
	}

	// Room for the reserve but not the segment: still refused.
	used, _ = fs.usage()
	fs.setQuota(used + 2*reserve)
	if _, err := writeBatch(context.Background(), s, set("a", "2")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("with the reserve free but not the segment: %v", err)
	}
	// Room for both: writes resume and the gauge goes back to 0.
	fs.setQuota(used + int64(reserve) + 2*room)
	if r := mustWrite(t, s, set("a", "2")); r.Index != applied+1 {
		t.Fatalf("write after space returned at %d, want %d", r.Index, applied+1)
	}
	if s.DiskFull() || gauge() != 0 {
		t.Fatalf("space back: DiskFull %v, gauge %v", s.DiskFull(), gauge())
	}
	mustVerify(t, s)
}
