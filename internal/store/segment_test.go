package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func TestBlockRefRoundTrip(t *testing.T) {
	t.Parallel()
	r := blockRef{seq: 7, off: 1 << 40, n: 81920, payloadAt: 17}
	got, ok, err := decodeBlockRef(r.encode(nil))
	if err != nil || !ok || got != r {
		t.Fatalf("decoded %+v, %v, %v; want %+v", got, ok, err, r)
	}
	// A block stored in Pebble is not a reference.
	var b wal.BlockBuilder
	e := wal.Entry{Index: 1, Kind: wal.KindData, Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k"), Value: []byte("v")}}}
	b.AddEntry(&e, wal.Hash{}, true)
	if _, ok, err := decodeBlockRef(b.Finish(nil, wal.CompressNone)); ok || err != nil {
		t.Fatalf("a block taken for a reference: %v %v", ok, err)
	}
	for _, bad := range [][]byte{
		{blockRefTag},
		append(r.encode(nil), 0),                                   // trailing byte
		blockRef{seq: 0, off: 8, n: 1}.encode(nil),                 // no segment 0
		blockRef{seq: 1, off: 8, n: 10, payloadAt: 11}.encode(nil), // payload past the end
	} {
		if _, ok, err := decodeBlockRef(bad); !ok || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%x: ok %v err %v, want ErrCorrupt", bad, ok, err)
		}
	}
}

func TestSegTailRoundTrip(t *testing.T) {
	t.Parallel()
	tl := segTail{seq: 3, off: 12345}
	if got, err := decodeSegTail(tl.encode()); err != nil || got != tl {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {0x80}, append(tl.encode(), 1)} {
		if _, err := decodeSegTail(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

// TestReadGate: quiesce waits for the readers that entered before it, not
// for those that enter after, and gives up on a reader that stays.
func TestReadGate(t *testing.T) {
	t.Parallel()
	var g readGate
	quit := make(chan struct{})
	if !g.quiesce(time.Second, quit) {
		t.Fatal("no reader, yet quiesce failed")
	}
	old := g.enter()
	if g.quiesce(20*time.Millisecond, quit) {
		t.Fatal("quiesce returned while a reader that entered before was still in")
	}
	// A reader entering now (after the flip) does not hold the next one up
	// once the old one has left...
	young := g.enter()
	g.leave(old)
	// ...but the slot it entered is the one the next flip reuses: it must
	// leave first. Until then, quiesce fails without flipping again.
	if g.quiesce(20*time.Millisecond, quit) {
		t.Fatal("quiesce flipped into a slot still in use")
	}
	g.leave(young)
	done := make(chan bool)
	go func() { done <- g.quiesce(time.Second, quit) }()
	if !<-done {
		t.Fatal("quiesce failed with no reader left")
	}
}

// TestSegmentRotationAndCollection: with small segments and a short log,
// segments fill, new ones open, and those no block key points into any
// more are removed; every value stays readable, through restarts.
func TestSegmentRotationAndCollection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "seg-rotate", Dir: dir, Compression: wal.CompressNone, Logger: quietLogger(),
		Retention: Retention{MaxEntries: 8, MaxBytes: -1, MaxAge: -1}, segmentBytes: 32 << 10, collectEvery: 5 * time.Millisecond, History: noHistory}
	s := openTest(t, o)
	created := s.Metrics().LogSegmentEvents["created"]
	// A value never rewritten keeps its block, retired, and its segment.
	mustWrite(t, s, setb("pinned", pattern(-1, 3000)))
	const n = 300
	for i := range n {
		// Ten keys, rewritten over and over: most blocks leave the log
		// with nothing live, and their segments go.
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i%10), pattern(i, 3000)))
	}
	if got := s.Metrics().LogSegmentEvents["created"] - created; got < 20 {
		t.Fatalf("%v segments created for %d kB", got, n*3)
	}
	// The collector removes segments a few at a time: wait until it is
	// left with the two or three holding the last ten values and the
	// retained log, and the pinned value's until it is compacted
	// (TestSegmentCompaction).
	deadline := time.Now().Add(60 * time.Second)
	for {
		seqs, err := s.segs.list()
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) <= 5 && s.Metrics().LogSegmentEvents["removed"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segments %v left after 60s, %v removed", seqs, s.Metrics().LogSegmentEvents["removed"])
		}
		time.Sleep(5 * time.Millisecond)
	}
	check := func(s *Store) {
		t.Helper()
		if v, _, ok := get(t, s, "pinned"); !ok || v != string(pattern(-1, 3000)) {
			t.Fatal("the pinned value is lost")
		}
		for i := n - 10; i < n; i++ {
			if v, _, ok := get(t, s, fmt.Sprintf("k%d", i%10)); !ok || v != string(pattern(i, 3000)) {
				t.Fatalf("k%d: wrong value after rotation", i%10)
			}
		}
		lr, err := s.LogRange()
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.ReadLog(lr.First, 100, 1<<20)
		if err != nil || uint64(len(es)) != lr.Last-lr.First+1 {
			t.Fatalf("ReadLog of the retained log: %d entries, %v", len(es), err)
		}
		mustVerify(t, s)
	}
	check(s)
	s.Close()
	s = openTest(t, o)
	check(s)
	mustWrite(t, s, set("after", "restart"))
	check(s)
}

// faultFS injects faults into the log segments of a store: the next
// fdatasync (failSync) or write (failWrite) reports an error after it did
// its work (the block reached the disk, the committer is told it did not,
// as EIO from a device that took the data may); creating one fails
// (failCreate); a hook runs before each fdatasync (syncHook).
type faultFS struct {
	vfs.FS
	failSync, failWrite atomic.Bool
	failCreate          atomic.Bool // creating a segment fails (ENOSPC) while set
	failOpen            atomic.Bool // opening a segment to read it fails (EMFILE) while set
	// syncHook, when set, runs at the start of every segment fdatasync:
	// before the data is durable, where a power loss may keep any part
	// of what was written.
	syncHook atomic.Pointer[func()]
}

func (fs *faultFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if _, ok := parseSegName(fs.PathBase(name)); !ok || err != nil {
		return f, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if _, ok := parseSegName(fs.PathBase(name)); ok && fs.failCreate.Load() {
		return nil, syscall.ENOSPC
	}
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *faultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if _, ok := parseSegName(fs.PathBase(name)); ok && fs.failOpen.Load() {
		return nil, syscall.EMFILE
	}
	return fs.FS.Open(name, opts...)
}

func (fs *faultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

func (f *faultFile) SyncData() error {
	if h := f.fs.syncHook.Load(); h != nil {
		(*h)()
	}
	if err := f.File.SyncData(); err != nil {
		return err
	}
	if f.fs.failSync.CompareAndSwap(true, false) {
		return syscall.EIO
	}
	return nil
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if err == nil && f.fs.failWrite.CompareAndSwap(true, false) {
		return n, syscall.EIO
	}
	return n, err
}

// openFaulty opens a store on a crashable in-memory filesystem whose
// segment files fail when fs says.
func openFaulty(t *testing.T, name string) (*Store, *faultFS, *vfs.MemFS, Options) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	fs := &faultFS{FS: mem}
	o := crashOptions(name, mem)
	o.FS = fs
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, fs, mem, o
}

// writeThenFailSync opens a store with openFaulty, writes "a"
// (acknowledged, returned) and then "b", whose segment fsync reports a
// failure after it wrote the block. With noNewSegment, creating the next
// segment fails (ENOSPC) from then on.
func writeThenFailSync(t *testing.T, name string, noNewSegment bool) (*Store, *vfs.MemFS, Options, WriteResult) {
	t.Helper()
	s, fs, mem, o := openFaulty(t, name)
	a := mustWrite(t, s, setb("a", pattern(1, 2000)))
	fs.failSync.Store(true)
	fs.failCreate.Store(noNewSegment)
	if _, err := writeBatch(t.Context(), s, setb("b", pattern(2, 2000))); !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("write whose fsync failed: %v", err)
	}
	return s, mem, o, a
}

// TestSegmentFailNoNewSegment: when the segment after a failed group
// cannot be created (a full disk), nothing says where the current one's
// blocks end; a restart before one is created must still not replay the
// abandoned block, whose write was answered with an error.
func TestSegmentFailNoNewSegment(t *testing.T) {
	t.Parallel()
	s, mem, o, a := writeThenFailSync(t, "seg-fail-nonew", true)
	if _, err := writeBatch(t.Context(), s, setb("c", pattern(3, 2000))); err == nil {
		t.Fatal("a write succeeded with no segment to write to")
	}
	s2 := crashReopen(t, s, mem, o)
	if _, _, ok := get(t, s2, "b"); ok {
		t.Fatal("the abandoned block was replayed")
	}
	if v, _, ok := get(t, s2, "a"); !ok || v != string(pattern(1, 2000)) {
		t.Fatal("acknowledged a lost")
	}
	if s2.AppliedIndex() != a.Index {
		t.Fatalf("applied %d after the restart, want %d", s2.AppliedIndex(), a.Index)
	}
	mustVerify(t, s2)
	if r := mustWrite(t, s2, set("d", "x")); r.Index != a.Index+1 {
		t.Fatalf("write after the restart at %d, want %d", r.Index, a.Index+1)
	}
	mustVerify(t, s2)
}

// TestSegmentSyncFailure: a block whose fsync failed is not acknowledged,
// its index is used by the next block, in a new segment, and a replay
// after a power loss (Pebble having synced nothing) applies the
// acknowledged block, never the abandoned one, even though the abandoned
// one reached the disk whole.
func TestSegmentSyncFailure(t *testing.T) {
	t.Parallel()
	s, mem, o, a := writeThenFailSync(t, "seg-syncfail", false)
	if _, _, ok := get(t, s, "b"); ok {
		t.Fatal("the failed write is visible")
	}
	b2 := mustWrite(t, s, setb("b2", pattern(3, 2000)))
	if b2.Index != a.Index+1 {
		t.Fatalf("write after the failure at %d, want %d", b2.Index, a.Index+1)
	}
	if ref := segmentRef(t, s, b2.Index); ref.seq != segmentRef(t, s, a.Index).seq+1 {
		t.Fatalf("block after a failed fsync in segment %d, want a new one", ref.seq)
	}
	failures := s.Metrics().LogSegmentEvents["failed"]
	if failures < 1 {
		t.Fatal("segment failure not counted")
	}
	// Power loss: only what was synced survives; Pebble synced nothing
	// since the database was created.
	s2 := crashReopen(t, s, mem, o)
	if got := s2.Metrics().LogReplayedEntries; got != 2 {
		t.Fatalf("%v entries replayed, want 2", got)
	}
	if s2.AppliedIndex() != b2.Index {
		t.Fatalf("applied %d after the power loss, want %d", s2.AppliedIndex(), b2.Index)
	}
	if _, _, ok := get(t, s2, "b"); ok {
		t.Fatal("the abandoned block was replayed")
	}
	for k, seed := range map[string]int{"a": 1, "b2": 3} {
		if v, _, ok := get(t, s2, k); !ok || v != string(pattern(seed, 2000)) {
			t.Fatalf("acknowledged %s lost", k)
		}
	}
	mustVerify(t, s2)
	if r := mustWrite(t, s2, set("c", "x")); r.Index != b2.Index+1 {
		t.Fatalf("write after the replay at %d", r.Index)
	}
	mustVerify(t, s2)
}

// TestSegmentTornTail: bytes after the last block (a frame cut short, a
// segment whose creation a crash interrupted) are ignored at open and
// overwritten; nothing acknowledged is lost.
func TestSegmentTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "seg-torn", Dir: dir, Compression: wal.CompressNone, Logger: quietLogger()}
	s := openTest(t, o)
	for i := range 3 {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i), pattern(i, 2000)))
	}
	tail := s.segs.tailNow()
	s.Close()

	fs := vfs.Default
	f, err := fs.OpenReadWrite(fs.PathJoin(dir, segName(tail.seq)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	// A frame header promising 5000 bytes, and 100 of them.
	torn := append([]byte{0x88, 0x13, 0, 0, 1, 2, 3, 4}, bytes.Repeat([]byte{7}, 100)...)
	if _, err := f.WriteAt(torn, tail.off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// And a next segment with half a header.
	nf, err := fs.Create(fs.PathJoin(dir, segName(tail.seq+1)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	nf.Write(segHeader(tail.seq, tail.off)[:10])
	nf.Close()

	s = openTest(t, o)
	if seqs, _ := s.segs.list(); seqs[len(seqs)-1] != tail.seq {
		t.Fatalf("segments %v after open: the torn one was kept", seqs)
	}
	if got := s.segs.tailNow(); got != tail {
		t.Fatalf("appending at %+v, want %+v", got, tail)
	}
	r := mustWrite(t, s, setb("after", pattern(9, 2000)))
	for i := range 3 {
		if v, _, ok := get(t, s, fmt.Sprintf("k%d", i)); !ok || v != string(pattern(i, 2000)) {
			t.Fatalf("k%d lost", i)
		}
	}
	s.Close()
	s = openTest(t, o)
	if s.AppliedIndex() != r.Index {
		t.Fatalf("applied %d, want %d", s.AppliedIndex(), r.Index)
	}
	if v, _, ok := get(t, s, "after"); !ok || v != string(pattern(9, 2000)) {
		t.Fatal("write over the torn tail lost")
	}
	mustVerify(t, s)
}

// TestSegmentBlockDamaged: a flipped byte in a block in its segment fails
// the block's frame check: the log read fails with ErrCorrupt and Verify
// names the block.
func TestSegmentBlockDamaged(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "seg-damaged", Compression: wal.CompressNone})
	mustWrite(t, s, set("a", "1"))
	r := mustWrite(t, s, set("b", "2"))
	mustWrite(t, s, set("c", "3"))
	flipSegmentByte(t, s, r.Index, 3)
	before := integrityErrors(s, "log_block")
	if _, err := s.ReadLog(r.Index, 10, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadLog of a damaged block: %v", err)
	}
	// Counted, as a block that fails to decode is: a source hitting it
	// only ends the stream, which says nothing about the damage.
	if got := integrityErrors(s, "log_block"); got != before+1 {
		t.Errorf("log_block integrity errors %v -> %v", before, got)
	}
	rep, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if p := findProblem(rep, ProblemLogBlock, nil); p == nil || p.Index != r.Index {
		t.Fatalf("verify: %s", problemList(rep))
	}
}

// TestSegmentMissing: a store whose segment holding the log tail is gone
// does not open (it would reuse indexes); the error says which.
func TestSegmentMissing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "seg-missing", Dir: dir, Logger: quietLogger()}
	s := openTest(t, o)
	mustWrite(t, s, set("a", "1"))
	tail := s.segs.tailNow()
	s.Close()
	if err := vfs.Default.Remove(vfs.Default.PathJoin(dir, segName(tail.seq))); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open without the tail's segment: %v", err)
	}
}

// TestDiskFullInSegment: ENOSPC while appending to a segment fails the
// write cleanly (507 upstream), reads go on, and writes resume when space
// returns; nothing stored is damaged.
func TestDiskFullInSegment(t *testing.T) {
	t.Parallel()
	fs := newQuotaFS(vfs.NewMem(), 1<<30)
	o := Options{Name: "seg-full", Dir: "/db", FS: fs, MinFreeBytes: 1, BallastBytes: -1,
		Compression: wal.CompressNone, Logger: quietLogger(), segmentBytes: 1 << 20}
	s := openTest(t, o)
	for i := range 5 {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i), pattern(i, 2000)))
	}
	used, _ := fs.usage()
	fs.setQuota(used + 4096)
	_, err := writeBatch(t.Context(), s, setb("big", pattern(99, 100_000)))
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("write past the quota: %v", err)
	}
	for i := range 5 {
		if v, _, ok := get(t, s, fmt.Sprintf("k%d", i)); !ok || v != string(pattern(i, 2000)) {
			t.Fatalf("k%d unreadable while the disk is full", i)
		}
	}
	fs.setQuota(1 << 30)
	r := mustWrite(t, s, setb("big", pattern(99, 100_000)))
	if r.Index != 6 {
		t.Fatalf("write after space returned at %d", r.Index)
	}
	mustVerify(t, s)
	s.Close()
	s = openTest(t, o)
	if v, _, ok := get(t, s, "big"); !ok || v != string(pattern(99, 100_000)) {
		t.Fatal("big lost after restart")
	}
	mustVerify(t, s)
}

// TestNoSegmentsForUnsyncedGroups: Raft commands (made durable by the
// Raft log) keep their blocks in Pebble.
func TestNoSegmentsForUnsyncedGroups(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "seg-raft"})
	c := &committer{s: s}
	if c.writeOptions([]*request{{kind: reqRaft}}) != pebble.NoSync || needsSync([]*request{{kind: reqRaft}, {kind: reqCache}}) {
		t.Fatal("a Raft group asks for a sync")
	}
	if !needsSync([]*request{{kind: reqRaft}, {kind: reqWrite}}) {
		t.Fatal("a group with a write does not ask for a sync")
	}
	c.g.appended = true
	if c.writeOptions([]*request{{kind: reqWrite}}) != pebble.NoSync {
		t.Fatal("a group synced by its segment syncs Pebble too")
	}
	c.g.appended = false
	if c.writeOptions([]*request{{kind: reqRaftReset}}) != pebble.Sync {
		t.Fatal("a durable group with no block in a segment is not synced")
	}
}

// TestSegmentReplayKeepsBatchIDs: the outcome of an idempotent write whose
// Pebble batch a power loss took is restored by the replay, so a retry of
// it is answered with the first outcome, not applied again.
func TestSegmentReplayKeepsBatchIDs(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := Options{Name: "seg-ids", Dir: "/data/db", FS: mem, MinFreeBytes: 1, BallastBytes: -1,
		Logger: quietLogger(), collectEvery: time.Hour}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Write(t.Context(), Batch{ID: []byte("retry-me"), Ops: []wal.Op{set("k", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	s2 := crashReopen(t, s, mem, o)
	if s2.Metrics().LogReplayedEntries == 0 {
		t.Fatal("nothing replayed: the test does not reach the replay")
	}
	mustWrite(t, s2, set("k", "2"))
	again, err := s2.Write(t.Context(), Batch{ID: []byte("retry-me"), Ops: []wal.Op{set("k", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Index != first.Index {
		t.Fatalf("retry answered with index %d, the write was %d: applied again", again.Index, first.Index)
	}
	if v, _, _ := get(t, s2, "k"); v != "2" {
		t.Fatalf("k = %q: the retry was applied again", v)
	}
	mustVerify(t, s2)
}

func TestBatchIDFrame(t *testing.T) {
	t.Parallel()
	ids := map[string]batchOutcome{"a": {index: 7, time: 99, changed: true}, "bb": {index: 8, time: 100}}
	enc := encodeIDs(nil, 42, ids)
	binary.LittleEndian.PutUint32(enc[idsCRCAt:], 0xfeedbeef) // as append does
	got, first, crc, err := decodeIDs(enc)
	if err != nil || len(got) != 2 || got["a"] != ids["a"] || got["bb"] != ids["bb"] || first != 42 || crc != 0xfeedbeef {
		t.Fatalf("%+v %d %x %v", got, first, crc, err)
	}
	if encodeIDs(nil, 1, nil) != nil {
		t.Fatal("a frame for no outcomes")
	}
	good := encodeIDs(nil, 1, ids)
	for _, bad := range [][]byte{nil, {idsTag}, good[:len(good)-1], append(good, 0), {idsTag, 200, 1}, good[:idsCRCAt+4]} {
		if _, _, _, err := decodeIDs(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

// TestCheckpointHoldsSegments: a checkpoint carries the segments its
// blocks are in (sealed ones linked, the open one copied), opens on its
// own with every value, and is not changed by the source writing on,
// removing and recycling segments afterwards.
func TestCheckpointHoldsSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "seg-checkpoint", Dir: dir + "/src", Compression: wal.CompressNone, Logger: quietLogger(),
		Retention: Retention{MaxEntries: 4, MaxBytes: -1, MaxAge: -1}, segmentBytes: 16 << 10, collectEvery: 2 * time.Millisecond}
	s := openTest(t, o)
	for i := range 40 {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i%10), pattern(i, 2000)))
	}
	cp := dir + "/cp"
	h, err := s.Checkpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	// The source goes on: its old segments are removed, and recycled
	// unless the checkpoint links them.
	recycled := s.Metrics().LogSegmentEvents["recycled"]
	for i := 40; i < 400; i++ {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i%10), pattern(i, 2000)))
		if i%5 == 0 {
			time.Sleep(3 * time.Millisecond) // the collector's turn
		}
	}
	if s.Metrics().LogSegmentEvents["recycled"] == recycled {
		t.Fatal("no segment recycled: the test does not reach recycling")
	}
	s.Close()
	c := openTest(t, Options{Name: "seg-checkpoint-copy", Dir: cp, Logger: quietLogger()})
	if c.AppliedIndex() < h.Index {
		t.Fatalf("checkpoint at %d opens at %d", h.Index, c.AppliedIndex())
	}
	for i := 30; i < 40; i++ {
		if v, _, ok := get(t, c, fmt.Sprintf("k%d", i%10)); !ok || v != string(pattern(i, 2000)) {
			t.Fatalf("k%d wrong in the checkpoint", i%10)
		}
	}
	mustVerify(t, c)
}

// TestSegmentCompaction: a value that outlives the log keeps its retired
// block, and that block its segment; once the segment is sparse (a
// quarter of it or less referenced), the value is copied out and the
// segment removed, instead of being kept whole for as long as the value
// lives.
func TestSegmentCompaction(t *testing.T) {
	t.Parallel()
	o := Options{Name: "seg-compact", Dir: t.TempDir(), Compression: wal.CompressNone, Logger: quietLogger(),
		Retention: Retention{MaxEntries: 4, MaxBytes: -1, MaxAge: -1}, segmentBytes: 32 << 10, collectEvery: 2 * time.Millisecond, History: noHistory}
	s := openTest(t, o)
	// Past the first, small segments: the pinned value shares a full one
	// with values that die.
	for i := range 40 {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i%4), pattern(i, 3000)))
	}
	pinned := mustWrite(t, s, setb("pinned", pattern(-1, 3000)))
	seq := segmentRef(t, s, pinned.Index).seq
	compacted := s.Metrics().LogSegmentEvents["compacted"]
	materialized := s.Metrics().ValuesMaterialized
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i%4), pattern(i, 3000)))
		if _, err := s.opts.FS.Stat(s.opts.FS.PathJoin(s.opts.Dir, segName(seq))); err != nil {
			break // removed
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %d still there after %d writes", seq, i)
		}
		if i%4 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if s.Metrics().LogSegmentEvents["compacted"] == compacted || s.Metrics().ValuesMaterialized == materialized {
		t.Fatal("segment removed without a compaction")
	}
	raw, err := decodeRecord(rawGet(t, s, dataKey(nil, []byte("pinned"))))
	if err != nil || raw.kind == recInLog {
		t.Fatalf("pinned's record after the compaction: %+v, %v", raw, err)
	}
	if v, idx, ok := get(t, s, "pinned"); !ok || v != string(pattern(-1, 3000)) || idx != pinned.Index {
		t.Fatal("the pinned value is lost")
	}
	mustVerify(t, s)
	s.Close()
	s = openTest(t, o)
	if v, _, ok := get(t, s, "pinned"); !ok || v != string(pattern(-1, 3000)) {
		t.Fatal("the pinned value is lost after a restart")
	}
	mustVerify(t, s)
}

// TestSparseSegments: the segments to compact are those below both the
// open one and the log whose blocks fill less than a quarter of their own
// file, sparsest first.
func TestSparseSegments(t *testing.T) {
	t.Parallel()
	each := func(n int64) func(uint64) int64 { return func(uint64) int64 { return n } }
	used := map[uint64]segUse{1: {1, 100}, 2: {5, 5000}, 3: {1, 50}, 4: {1, 100}, 7: {1, 10}, 9: {1, 10}}
	// 7 and 9 are not below both the tail (9) and the log (7); 2 is
	// dense; 1 and 4 are as sparse as each other.
	if got := sparseSegments(used, 9, 7, each(16<<10)); fmt.Sprint(got) != "[3 1 4]" {
		t.Fatalf("picked %v", got)
	}
	if got := sparseSegments(used, 9, 7, each(256)); fmt.Sprint(got) != "[3]" {
		t.Fatalf("picked %v with small segments", got)
	}
	if got := sparseSegments(map[uint64]segUse{1: {10, 9000}}, 9, 7, each(16<<10)); len(got) != 0 {
		t.Fatalf("picked %v, which is dense", got)
	}
	// Sparse is against the segment's own file: a small first segment
	// full of live blocks is not.
	sizes := func(seq uint64) int64 { return map[uint64]int64{1: 4096, 2: 64 << 10}[seq] }
	if got := sparseSegments(map[uint64]segUse{1: {2, 4000}, 2: {1, 8000}}, 9, 7, sizes); fmt.Sprint(got) != "[2]" {
		t.Fatalf("picked %v, want the 64 KiB segment an eighth used", got)
	}
}

// TestSegmentCapacityGrows: a store's first segment is small, and each
// next one twice the last, up to the configured size.
func TestSegmentCapacityGrows(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "seg-grow", Compression: wal.CompressNone, Logger: quietLogger(), segmentBytes: 256 << 10})
	var caps []int64
	var seq uint64
	for i := 0; len(caps) < 7 && i < 10000; i++ {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i), pattern(i, 3000)))
		s.segs.mu.Lock()
		if s.segs.curSeq != seq {
			seq = s.segs.curSeq
			caps = append(caps, s.segs.capacity)
		}
		s.segs.mu.Unlock()
	}
	want := []int64{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 256 << 10, 256 << 10}
	if fmt.Sprint(caps) != fmt.Sprint(want) {
		t.Fatalf("segment capacities %v, want %v", caps, want)
	}
	if def := (&segments{size: maxSegmentBytes}).nextCapacity(); def != 4<<20 {
		t.Fatalf("a store's first segment: %d bytes", def)
	}
}

// A segment compaction copies out at most maxBytesPerCompaction of live
// values a run (one block past it at most), and never fewer than one
// block, however large.
func TestCompactionTakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		blocks int
		live   int64
		want   bool
	}{
		{0, 0, true},
		{0, 1 << 30, true}, // the first block, whatever it holds
		{1, 64 << 10, true},
		{100, maxBytesPerCompaction - 1, true},
		{100, maxBytesPerCompaction, false},
		{1, 16 << 20, false}, // one block of a quarter segment's values
		{maxBlocksPerCompaction - 1, 0, true},
		{maxBlocksPerCompaction, 0, false},
	} {
		if got := compactionTakes(c.blocks, c.live); got != c.want {
			t.Errorf("compactionTakes(%d blocks, %d bytes) = %v, want %v", c.blocks, c.live, got, c.want)
		}
	}
	// Taking blocks of 1 MiB of live values each stops at the bound.
	var n int
	var live int64
	for ; compactionTakes(n, live) && n < 1000; n++ {
		live += 1 << 20
	}
	if live != maxBytesPerCompaction {
		t.Fatalf("took %d blocks, %d bytes of live values, want %d", n, live, maxBytesPerCompaction)
	}
}

// TestSegmentSize: a segment is a 64th of the log's byte cap, in whole
// MiB, between 4 and 64 MiB; a log without a byte cap has the largest.
func TestSegmentSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ maxBytes, want int64 }{
		{-1, 64 << 20},
		{0, 64 << 20},
		{1 << 20, 4 << 20},
		{128 << 20, 4 << 20},
		{512 << 20, 8 << 20},
		{1 << 30, 16 << 20},
		{1_000_000_000, 14 << 20},
		{4 << 30, 64 << 20},
		{1 << 40, 64 << 20},
	} {
		if got := segmentSize(c.maxBytes); got != c.want {
			t.Errorf("segmentSize(%d) = %d, want %d", c.maxBytes, got, c.want)
		}
	}
	s := openTest(t, Options{Name: "seg-size", Logger: quietLogger()})
	if s.segs.size != 16<<20 {
		t.Fatalf("a store at default settings makes segments of %d bytes", s.segs.size)
	}
}

// TestSpareNoLargerThanASegment: a removed segment larger than a segment
// (made for a large block, or before the size shrank) is not kept as the
// spare, nor is such a spare found at open; one that fits is.
func TestSpareNoLargerThanASegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fs := vfs.Default
	write := func(name string, n int) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	spare := filepath.Join(dir, spareName)
	g := newSegments(fs, dir, 64<<10, newStoreMetrics())
	if err := g.retire(write(segName(1), 64<<10+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(spare); !os.IsNotExist(err) || g.haveSpare {
		t.Fatalf("an oversized segment became the spare (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(1))); !os.IsNotExist(err) {
		t.Fatalf("the oversized segment was not removed: %v", err)
	}
	if err := g.retire(write(segName(2), 64<<10)); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(spare); err != nil || !g.haveSpare || st.Size() != 64<<10 {
		t.Fatalf("a segment that fits did not become the spare: %v", err)
	}

	// Opened with smaller segments, the spare goes; with the same size,
	// it stays.
	open := func(size int64) *segments {
		g := newSegments(fs, dir, size, newStoreMetrics())
		if err := g.openAll(); err != nil {
			t.Fatal(err)
		}
		g.dropLargeSpare()
		return g
	}
	if g := open(64 << 10); !g.haveSpare {
		t.Fatal("the spare was not found at open")
	}
	if g := open(32 << 10); g.haveSpare {
		t.Fatal("a spare larger than a segment kept at open")
	}
	if _, err := os.Stat(spare); !os.IsNotExist(err) {
		t.Fatalf("the oversized spare is still there: %v", err)
	}
}

// TestReadOnlyOpenKeepsTheSpare: opening a store read-only (qs verify, a
// snapshot's head) writes nothing, so a spare larger than its segments
// stays; the store's own writable open removes it.
func TestReadOnlyOpenKeepsTheSpare(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "seg-ro-spare", Dir: dir, Logger: quietLogger(), segmentBytes: 64 << 10}
	s := openTest(t, o)
	mustWrite(t, s, setb("k", []byte("v")))
	s.Close()
	spare := filepath.Join(dir, spareName)
	if err := os.WriteFile(spare, make([]byte, 128<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	ro := o
	ro.ReadOnly = true
	r, err := Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := os.Stat(spare); err != nil {
		t.Fatalf("a read-only open touched the spare: %v", err)
	}
	s = openTest(t, o)
	if v, _, ok := get(t, s, "k"); !ok || v != "v" {
		t.Fatal("the value is lost")
	}
	if _, err := os.Stat(spare); !os.IsNotExist(err) {
		t.Fatalf("the writable open kept a spare larger than its segments: %v", err)
	}
}

// TestSparseSegmentsCompactedTogether: one compaction run frees the
// retired blocks of every sparse segment (within its bounds), not one
// segment a round, which let sparse segments pile up faster than they
// went under churn with small segments.
func TestSparseSegmentsCompactedTogether(t *testing.T) {
	t.Parallel()
	o := Options{Name: "seg-compact-all", Dir: t.TempDir(), Compression: wal.CompressNone, Logger: quietLogger(),
		Retention: Retention{MaxEntries: 4, MaxBytes: -1, MaxAge: -1}, segmentBytes: 32 << 10, collectEvery: time.Hour, History: noHistory}
	s := openTest(t, o)
	churn := func(n int) {
		for i := range n {
			mustWrite(t, s, setb(fmt.Sprintf("k%d", i%4), pattern(i, 3000)))
		}
	}
	// Past the first, small segments, one pinned value in each of three
	// segments full of values that die.
	churn(40)
	pinned := map[string]WriteResult{}
	seqs := map[uint64]bool{}
	for p := range 3 {
		name := fmt.Sprintf("pinned%d", p)
		pinned[name] = mustWrite(t, s, setb(name, pattern(-1-p, 3000)))
		seqs[segmentRef(t, s, pinned[name].Index).seq] = true
		churn(12)
	}
	churn(12)
	if len(seqs) != 3 {
		t.Fatalf("the pinned values are in segments %v, want three", seqs)
	}
	var synced uint64
	sparse, err := s.collectSegments(&synced)
	if err != nil {
		t.Fatal(err)
	}
	for seq := range seqs {
		if !slices.Contains(sparse, seq) {
			t.Fatalf("segment %d is not among the sparse %v", seq, sparse)
		}
	}
	compacted := s.Metrics().LogSegmentEvents["compacted"]
	if err := s.compactSegments(sparse); err != nil {
		t.Fatal(err)
	}
	if got := s.Metrics().LogSegmentEvents["compacted"] - compacted; got != float64(len(sparse)) {
		t.Fatalf("one run compacted %v of the %d sparse segments", got, len(sparse))
	}
	mustWrite(t, s, setb("k0", []byte("after"))) // a commit for the next collection
	if _, err := s.collectSegments(&synced); err != nil {
		t.Fatal(err)
	}
	for seq := range seqs {
		if _, err := s.opts.FS.Stat(s.opts.FS.PathJoin(s.opts.Dir, segName(seq))); err == nil {
			t.Fatalf("segment %d is still there after its compaction", seq)
		}
	}
	for name, w := range pinned {
		p := int(name[len(name)-1] - '0')
		if v, idx, ok := get(t, s, name); !ok || v != string(pattern(-1-p, 3000)) || idx != w.Index {
			t.Fatalf("%s is lost", name)
		}
	}
	mustVerify(t, s)
}
