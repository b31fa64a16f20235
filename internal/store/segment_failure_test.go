package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Failure tests of the log segments, from a review of their first
// version (commit 6fe0daf, on which each fails); each names the defect it
// showed.

// crashReopen takes a power-loss image of mem (nothing unsynced kept),
// closes s and opens the image.
func crashReopen(t *testing.T, s *Store, mem *vfs.MemFS, o Options) *Store {
	t.Helper()
	image := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	o.FS = image
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

func crashOptions(name string, mem *vfs.MemFS) Options {
	return Options{Name: name, Dir: "/data/db", FS: mem, MinFreeBytes: 1, BallastBytes: -1,
		Compression: wal.CompressNone, Logger: quietLogger(), collectEvery: time.Hour}
}

// TestSegmentFaultResetRaftDurable: ResetRaft says it is durable, but a group
// with no log block is committed to Pebble without sync once the store
// has segments (writeOptions: segmented groups are NoSync even when no
// block was appended), so a power loss brings the old Raft index back.
func TestSegmentFaultResetRaftDurable(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := crashOptions("review-resetraft", mem)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyRaft(t.Context(), raftCommands()); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncRaft(); err != nil {
		t.Fatal(err)
	}
	if s.RaftApplied() == 0 {
		t.Fatal("no raft index")
	}
	if err := s.ResetRaft(t.Context()); err != nil {
		t.Fatal(err)
	}
	s2 := crashReopen(t, s, mem, o)
	if got := s2.RaftApplied(); got != 0 {
		t.Fatalf("raft applied %d after a power loss following an acknowledged ResetRaft, want 0", got)
	}
}

// TestSegmentFaultNoopBatchIDDurable: the outcome of an idempotent write that
// changed nothing is acknowledged, but its group has no block, so it is
// neither in a segment nor synced in Pebble: after a power loss a retry
// of the batch is applied again over a later write.
func TestSegmentFaultNoopBatchIDDurable(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := crashOptions("review-noopid", mem)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, set("k", "1"))
	noop, err := s.Write(t.Context(), Batch{ID: []byte("noop"), Ops: []wal.Op{set("k", "1")}})
	if err != nil || noop.Changed || noop.Duplicate {
		t.Fatalf("no-op write: %+v %v", noop, err)
	}
	s2 := crashReopen(t, s, mem, o)
	expectRetryDuplicate(t, s2, Batch{ID: []byte("noop"), Ops: []wal.Op{set("k", "1")}}, "k")
}

// expectRetryDuplicate sets key to "later", then retries batch b, whose
// outcome the store must know: the retry is answered as a duplicate and
// changes nothing.
func expectRetryDuplicate(t *testing.T, s *Store, b Batch, key string) {
	t.Helper()
	mustWrite(t, s, set(key, "later"))
	again, err := s.Write(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate {
		t.Errorf("the retry of batch %q, whose outcome the store must know, is not answered as a duplicate: %+v", b.ID, again)
	}
	if v, _, _ := get(t, s, key); v != "later" {
		t.Fatalf("%s = %.10q: the retry of batch %q was applied again, over a later write", key, v, b.ID)
	}
}

// TestSegmentFaultFailedSyncNotReplayed: a block whose fdatasync failed is
// abandoned (the write fails), but when no block follows it before the
// store is closed, nothing marks it abandoned: the next open replays it
// and the failed write appears (docs: "blocks abandoned after a failed
// fsync are never replayed").
func TestSegmentFaultFailedSyncNotReplayed(t *testing.T) {
	t.Parallel()
	s, _, o, a := writeThenFailSync(t, "review-syncfail", false)
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, _, ok := get(t, s2, "b"); ok || s2.AppliedIndex() != a.Index {
		t.Fatalf("the write that failed is applied after a restart (applied %d, acknowledged %d)", s2.AppliedIndex(), a.Index)
	}
}

// appendSyncedGroup does on the committer's behalf (the committer idle)
// the first half of a group's commit: it appends the block of the next
// entry, holding op, to the segments and syncs it. Pebble's batch, the
// second half, is left to the caller (s.segs.done or s.segs.fail).
func appendSyncedGroup(t *testing.T, s *Store, op wal.Op) wal.Entry {
	t.Helper()
	head := appliedHash(t, s)
	e := wal.Entry{Index: head.index + 1, Time: head.time + 1, Kind: wal.KindData, Ops: []wal.Op{op}}
	var b wal.BlockBuilder
	b.AddEntry(&e, head.hash, true)
	hdr, payload := b.Parts(nil, wal.CompressNone)
	if _, _, err := s.segs.append(hdr, payload, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.segs.sync(); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSegmentFaultBatchFailureAfterSegmentSync: when a group's Pebble batch
// fails after its segment fsync succeeded (commit: groupErr set by
// batch.Commit, then segs.fail()), fail() resets the tail to synced,
// which already covers the failed block. The next segment's header then
// declares the failed block part of the log: a replay after a power loss
// applies it, then finds the acknowledged block reusing its index "not
// the next block", stops, and resume removes the later segments. The
// acknowledged writes are lost and the failed one appears.
//
// batch.Commit cannot be made to fail from a test without breaking Pebble,
// so the test does on the committer's behalf (the committer idle) what
// commit does in that case: append, sync, fail.
func TestSegmentFaultBatchFailureAfterSegmentSync(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := crashOptions("review-batchfail", mem)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	a := mustWrite(t, s, setb("a", pattern(1, 2000)))
	appendSyncedGroup(t, s, setb("failed", pattern(2, 2000)))
	s.segs.fail() // batch.Commit failed: the write is reported failed
	// Acknowledged writes after it, reusing its index.
	b2 := mustWrite(t, s, setb("b2", pattern(3, 2000)))
	b3 := mustWrite(t, s, setb("b3", pattern(4, 2000)))
	if b2.Index != a.Index+1 {
		t.Fatalf("b2 at %d", b2.Index)
	}
	s2 := crashReopen(t, s, mem, o)
	if _, _, ok := get(t, s2, "failed"); ok {
		t.Error("the block of the failed group was replayed")
	}
	for k, seed := range map[string]int{"a": 1, "b2": 3, "b3": 4} {
		if v, _, ok := get(t, s2, k); !ok || v != string(pattern(seed, 2000)) {
			t.Errorf("acknowledged %s lost", k)
		}
	}
	if s2.AppliedIndex() != b3.Index {
		t.Errorf("applied %d after the power loss, acknowledged %d", s2.AppliedIndex(), b3.Index)
	}
}

// A checkpoint taken while a group is in flight, its block synced but its
// Pebble batch not yet committed, must not hold the block: if the batch
// then fails, the write is answered as failed and its index goes to
// another write, but the checkpoint (a replica's bootstrap, a backup)
// would replay it and fork from the store. As above, the test does on the
// committer's behalf what commit does: append, sync, then (here after the
// checkpoint) fail.
func TestCheckpointExcludesGroupInFlight(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := crashOptions("ckpt-inflight", mem)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := mustWrite(t, s, setb("a", pattern(1, 2000)))
	e := appendSyncedGroup(t, s, setb("failed", pattern(2, 2000)))
	dir := o.Dir + "-ckpt"
	// batch.Commit failed: the write is reported failed.
	h, err := checkpointInFlight(s, dir, s.segs.fail)
	if err != nil {
		t.Fatal(err)
	}
	other := mustWrite(t, s, setb("other", pattern(3, 2000)))
	if h.Index != a.Index || other.Index != e.Index {
		t.Fatalf("checkpoint head %d, acknowledged %d; the next write took %d", h.Index, a.Index, other.Index)
	}
	c, err := Open(Options{Name: o.Name, Dir: dir, FS: mem, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, ok := get(t, c, "failed"); ok || c.AppliedIndex() != a.Index {
		t.Fatalf("the checkpoint replayed the failed group's block (applied %d, acknowledged %d)", c.AppliedIndex(), a.Index)
	}
	if v, _, ok := get(t, c, "a"); !ok || v != string(pattern(1, 2000)) {
		t.Fatal("the checkpoint lost an acknowledged write")
	}
	mustVerify(t, c)
}

// TestSegmentFaultFailedWriteIDsFrameAdopted: when the write of a group's frames
// fails (append returns the error, c.appended stays false, so fail() is
// not called), the next group overwrites at the same tail. If its block
// has the same length and it has no batch IDs, the failed group's batch
// ID frame is left right after it, inside the synced data; a replay reads
// it as the new block's outcomes. A retry of the failed batch is then
// answered "duplicate, applied at index i" although index i holds another
// write: the client's write is lost.
func TestSegmentFaultFailedWriteIDsFrameAdopted(t *testing.T) {
	t.Parallel()
	s, fs, mem, o := openFaulty(t, "review-writefail")
	mustWrite(t, s, set("a", "1"))
	fs.failWrite.Store(true)
	if _, err := s.Write(t.Context(), Batch{ID: []byte("mine"), Ops: []wal.Op{set("k", "AAAA")}}); err == nil {
		t.Fatal("the write whose segment write failed succeeded")
	}
	other := mustWrite(t, s, set("k", "BBBB"))
	s2 := crashReopen(t, s, mem, o)
	retry, err := s2.Write(t.Context(), Batch{ID: []byte("mine"), Ops: []wal.Op{set("k", "AAAA")}})
	if err != nil {
		t.Fatal(err)
	}
	if retry.Duplicate {
		t.Errorf("the retry of a failed batch answered as a duplicate applied at %d (that index is another write, %d)", retry.Index, other.Index)
	}
	if v, _, _ := get(t, s2, "k"); v != "AAAA" {
		t.Fatalf("k = %q after the client retried its failed write", v)
	}
}

// TestSegmentFaultCollectionAfterSlowReader: a collection round that gives up
// because a reader stayed (quiesce timed out) has already recorded the
// applied index as handled (collectSegments sets *synced before remove),
// so no later round tries again until the next commit: on a store that
// stops writing, the unreferenced segments stay on disk indefinitely.
// While it waits (up to 100 ms a round) the collector holds segments.mu,
// which every append takes: writes stall behind it (logged).
func TestSegmentFaultCollectionAfterSlowReader(t *testing.T) {
	t.Parallel()
	o := Options{Name: "review-slowreader", Dir: t.TempDir(), Compression: wal.CompressNone, Logger: quietLogger(),
		Retention: Retention{MaxEntries: 8, MaxBytes: -1, MaxAge: -1}, segmentBytes: 32 << 10, collectEvery: 5 * time.Millisecond, History: noHistory}
	s := openTest(t, o)
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for i := range 100 {
		start := time.Now()
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i%10), pattern(i, 3000)))
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("slowest write while a reader held a view: %v", slowest)
	time.Sleep(300 * time.Millisecond) // the collector's rounds give up on the reader
	v.Close()
	time.Sleep(500 * time.Millisecond) // a hundred rounds, no reader left
	seqs, err := s.segs.list()
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) > 5 {
		t.Fatalf("%d segments left after the reader left and the store went idle (expect the 2-5 the retained log needs)", len(seqs))
	}
}

// TestSegmentFaultCheckpointAfterFailedSync: after an fsync failure the open
// segment is sealed (fail: cur = nil), and a checkpoint links it whole,
// abandoned frame included; nothing in the checkpoint marks the frame
// abandoned, so the replica that installs it replays the failed write at
// the index the root then gives to another write: the replica diverges
// (serves a value the root rejected, then refuses the root's entries).
func TestSegmentFaultCheckpointAfterFailedSync(t *testing.T) {
	t.Parallel()
	s, mem, o, a := writeThenFailSync(t, "review-ckpt-syncfail", false)
	defer s.Close()
	if _, err := s.Checkpoint("/data/ckpt"); err != nil {
		t.Fatal(err)
	}
	b2 := mustWrite(t, s, setb("b2", pattern(3, 2000)))
	ro := o
	ro.Dir, ro.Name, ro.FS = "/data/ckpt", "review-ckpt-replica", mem
	r, err := Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, ok := get(t, r, "b"); ok || r.AppliedIndex() != a.Index {
		t.Errorf("the checkpoint opens with the rejected write applied (applied %d, root had %d)", r.AppliedIndex(), a.Index)
	}
	es, err := s.ReadLog(b2.Index, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(t.Context(), es); err != nil {
		t.Errorf("the replica refuses the root's entry %d: %v", b2.Index, err)
	}
}

// TestSegmentTailRecordCorrupt: a store whose record of the segment tail
// (mseg) does not decode does not open (it could not tell where to append
// without reusing indexes); the error says it is corruption, and verify
// reports it.
func TestSegmentTailRecordCorrupt(t *testing.T) {
	t.Parallel()
	o := Options{Name: "seg-badtail", Dir: t.TempDir(), Logger: quietLogger()}
	s := openTest(t, o)
	mustWrite(t, s, set("a", "1"))
	rawSet(t, s, metaSegments, []byte{0x80})
	s.Close()
	expectRefused(t, o, "an undecodable segment tail record")
}

// TestSegmentSyncedBlockDamaged: a block the replay must apply, damaged
// below the end a later segment's header declares synced, is corruption:
// the store does not open, rather than stop the replay there and remove
// the later segments, which hold acknowledged writes.
func TestSegmentSyncedBlockDamaged(t *testing.T) {
	t.Parallel()
	var ref blockRef
	o := powerLossImage(t, "seg-synced-damage", 20, 16<<10, func(s *Store, writes []WriteResult) {
		ref = segmentRef(t, s, writes[0].Index)
		if last := segmentRef(t, s, writes[len(writes)-1].Index); last.seq == ref.seq {
			t.Fatal("all blocks in one segment: the test needs a later one")
		}
	})
	// The replay starts at the first block; that block's bytes are damaged.
	damageSegment(t, o, ref.seq, ref.off+int64(ref.n)/2, []byte("XX"))
	expectRefused(t, o, "a damaged synced block to replay")
}

// TestVerifySegmentTail: after a power loss that Pebble's unsynced batches
// did not survive, verify counts the blocks the next open replays from
// the segments, and finds nothing wrong; after the open, there are none.
func TestVerifySegmentTail(t *testing.T) {
	t.Parallel()
	var last WriteResult
	o := powerLossImage(t, "seg-verify-tail", 20, 16<<10, func(s *Store, writes []WriteResult) { last = writes[len(writes)-1] })
	rep, err := Verify(o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.TailEntries == 0 || rep.AppliedIndex+uint64(rep.TailEntries) != last.Index {
		t.Fatalf("before the replay: applied %d, tail %d entries in %d blocks, last write %d, problems %+v",
			rep.AppliedIndex, rep.TailEntries, rep.TailBlocks, last.Index, rep.Problems)
	}
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	rep, err = Verify(o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.TailEntries != 0 || rep.AppliedIndex != last.Index {
		t.Fatalf("after the replay: applied %d, tail %d entries, problems %+v", rep.AppliedIndex, rep.TailEntries, rep.Problems)
	}
}

// powerLossImage writes n values of 2000 bytes to a store with segments of
// segBytes (0: the default) on a crashable filesystem, calls inspect with
// the open store and the acknowledged writes, and cuts the power: Pebble
// synced nothing since the store was created, so an open of the image
// replays every block from the segments. It returns the options that open
// the image.
func powerLossImage(t *testing.T, name string, n int, segBytes int64, inspect func(s *Store, writes []WriteResult)) Options {
	t.Helper()
	mem := vfs.NewCrashableMem()
	o := crashOptions(name, mem)
	o.segmentBytes = segBytes
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	var writes []WriteResult
	for i := range n {
		writes = append(writes, mustWrite(t, s, setb(fmt.Sprintf("k%d", i), pattern(i, 2000))))
	}
	inspect(s, writes)
	o.FS = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	return o
}

// damageSegment overwrites segment seq's bytes at off with b.
func damageSegment(t *testing.T, o Options, seq uint64, off int64, b []byte) {
	t.Helper()
	f, err := o.FS.OpenReadWrite(o.FS.PathJoin(o.Dir, segName(seq)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// expectRefused checks that verify reports a segment problem in the
// database o opens, and that the open refuses it (ErrCorrupt) rather than
// drop what follows the damage.
func expectRefused(t *testing.T, o Options, damage string) {
	t.Helper()
	rep, err := Verify(o)
	if err != nil {
		t.Fatal(err)
	}
	if findProblem(rep, ProblemSegment, nil) == nil {
		t.Errorf("verify finds nothing wrong with %s (tail %d entries, applied %d): %+v", damage, rep.TailEntries, rep.AppliedIndex, rep.Problems)
	}
	s, err := Open(o)
	if errors.Is(err, ErrCorrupt) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Fatalf("with %s, the store opened at applied index %d instead of refusing", damage, s.AppliedIndex())
}

// A checkpoint taken while a group's Pebble batch has committed but the
// committer has not yet marked the group done (segments.done) must hold
// the group's block: Pebble's checkpoint copies its write-ahead log as it
// is when it copies it, so it holds the batch, and with it a block key
// pointing into the open segment. A copy stopped short of the group left
// that block out: the replica that installs the checkpoint has the write
// applied but not its block (its log cannot be read there, its large
// values fail their integrity check). The test puts the segments back in
// the state they were in between the batch's commit and done, which a
// checkpoint can meet if the committer is descheduled there: it writes
// the group normally, then marks it in flight again until the checkpoint
// has started.
func TestCheckpointHoldsGroupCommittedNotYetDone(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := crashOptions("ckpt-committed", mem)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustWrite(t, s, setb("a", pattern(1, 2000)))
	s.segs.mu.Lock()
	seq, at := s.segs.curSeq, s.segs.tail
	s.segs.mu.Unlock()
	b := mustWrite(t, s, setb("b", pattern(2, 2000)))
	s.segs.mu.Lock()
	if s.segs.curSeq != seq {
		s.segs.mu.Unlock()
		t.Fatal("the write went to a new segment")
	}
	// Back to the moment after the batch's commit, before done.
	s.segs.pending, s.segs.pendingAt = true, at
	s.segs.mu.Unlock()

	dir := o.Dir + "-ckpt"
	h, err := checkpointInFlight(s, dir, s.segs.done)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Name: o.Name, Dir: dir, FS: mem, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.AppliedIndex() != b.Index {
		t.Fatalf("checkpoint at %d (head %d), the store had committed %d", c.AppliedIndex(), h.Index, b.Index)
	}
	if _, err := c.ReadLog(b.Index, 1, 1<<20); err != nil {
		t.Errorf("the checkpoint cannot read the committed entry %d: %v", b.Index, err)
	}
	v, err := c.View()
	if err != nil {
		t.Fatal(err)
	}
	got, _, ok, err := v.Get([]byte("b"))
	v.Close()
	if err != nil || !ok || string(got) != string(pattern(2, 2000)) {
		t.Errorf("the checkpoint does not serve the committed write: %v", err)
	}
	mustVerify(t, c)
}

// checkpointInFlight makes a checkpoint of s into dir while a group is in
// flight, and settles the group (settle: done or fail, as the committer
// would) once the checkpoint waits for it, or after it if it does not.
func checkpointInFlight(s *Store, dir string, settle func()) (Head, error) {
	type result struct {
		h   Head
		err error
	}
	ckpt := make(chan result, 1)
	go func() {
		h, err := s.Checkpoint(dir)
		ckpt <- result{h, err}
	}()
	select {
	case r := <-ckpt: // made without waiting for the group
		settle()
		return r.h, r.err
	case <-time.After(100 * time.Millisecond): // waiting for it
		settle()
		r := <-ckpt
		return r.h, r.err
	}
}

// TestSegmentFaultRotateFailsAfterHeader: when opening the next segment
// fails after its header, saying where the current segment's blocks end,
// was synced and its directory entry too (here: opening it for readers
// fails, as with too many open files), the segment is removed, but that
// removal is not durable. A next block that still fitted went to the
// current segment, past the end the removed segment's header states; a
// power loss brought that segment back, and the replay stopped at the end
// it states: the acknowledged write after the failure was lost. The
// current segment now takes no more blocks after such a failure.
func TestSegmentFaultRotateFailsAfterHeader(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	fs := &faultFS{FS: mem}
	o := crashOptions("seg-rotate-fails", mem)
	o.FS = fs
	o.segmentBytes = 64 << 10 // a first segment of 4 KiB
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	a := mustWrite(t, s, setb("a", pattern(1, 2000)))
	seq := segmentRef(t, s, a.Index).seq
	// A block that does not fit in the rest of the first segment: the
	// next one is created, its header written and synced, then opening it
	// for readers fails.
	fs.failOpen.Store(true)
	if _, err := writeBatch(t.Context(), s, setb("big", pattern(2, 3000))); err == nil {
		t.Fatal("a write succeeded whose segment could not be opened")
	}
	fs.failOpen.Store(false)
	// A small block would still fit in the first segment, but must not
	// go there: it would be past the end the failed segment's header
	// states.
	c := mustWrite(t, s, set("c", "after the failure"))
	if ref := segmentRef(t, s, c.Index); ref.seq == seq {
		t.Errorf("c appended to segment %d after a failed rotation wrote the next one's header", seq)
	}
	s2 := crashReopen(t, s, mem, o)
	if v, _, ok := get(t, s2, "c"); !ok || v != "after the failure" {
		t.Errorf("acknowledged c lost after a power loss (applied %d, c at %d)", s2.AppliedIndex(), c.Index)
	}
	if v, _, ok := get(t, s2, "a"); !ok || v != string(pattern(1, 2000)) {
		t.Error("acknowledged a lost")
	}
	if s2.AppliedIndex() != c.Index {
		t.Errorf("applied %d after the power loss, acknowledged %d", s2.AppliedIndex(), c.Index)
	}
	mustVerify(t, s2)
}
