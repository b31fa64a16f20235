package store

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Damage and power loss in the log segments that once lost or duplicated
// acknowledged writes; each test names what it guards against.

// TestSegmentTornBatchIDFrame: a group's block and the frame of its batch
// ID outcomes are written together, then synced. A power loss during that
// sync may keep the pages of the block and lose a page of the ID frame.
// With the ID frame after the block (as it was), the replay applied the
// block (a write whose answer was lost, which is allowed) without its
// outcome, as nothing in the block says an ID frame follows: the
// client's retry of the batch, with the same ID, was applied a second
// time, over a later write. The test tears the ID frame wherever it is
// (the pages of its bytes that hold no byte of the block are lost), and
// then checks that the write is either replayed with its outcome or not
// at all.
func TestSegmentTornBatchIDFrame(t *testing.T) {
	t.Parallel()
	const page = 4096
	s, fs, mem, o := openFaulty(t, "seg-torn-ids")
	defer s.Close()
	mustWrite(t, s, set("a", "1"))
	const valueLen = 3000
	mine := func(id string, seed int) Batch {
		return Batch{ID: []byte(id), Ops: []wal.Op{setb("k", pattern(seed, valueLen))}}
	}
	// Sizes and order of the frames of an idempotent write like the one
	// to tear, and the size of a padding write, so that the ID frame can
	// be made to cross a page boundary.
	t0 := s.segs.tailNow().off
	probe, err := s.Write(t.Context(), mine("prob", 2))
	if err != nil {
		t.Fatal(err)
	}
	t1 := s.segs.tailNow().off
	idsFrame := int64(frameHeader + len(encodeIDs(nil, 1, map[string]batchOutcome{"mine": {}})))
	blockFrame := t1 - t0 - idsFrame
	idsAt := int64(0) // in the group's frames
	if segmentRef(t, s, probe.Index).off-frameHeader == t0 {
		idsAt = blockFrame
	}
	mustWrite(t, s, setb("pad", pattern(3, 2000)))
	t2 := s.segs.tailNow().off
	overhead := t2 - t1 - 2000
	// The ID frame is to start 20 bytes before a page boundary.
	pad := ((page-20-t2-overhead-idsAt)%page + 2*page) % page
	if pad < 200 {
		pad += page
	}
	mustWrite(t, s, setb("pad", pattern(4, int(pad))))
	t3 := s.segs.tailNow().off
	if (t3+idsAt)%page != page-20 {
		t.Fatalf("setup: the ID frame would start at %d (%d in its page), want %d", t3+idsAt, (t3+idsAt)%page, page-20)
	}
	// The power loss: during the fdatasync of the idempotent write.
	var image *vfs.MemFS
	cut := func() {
		if image == nil {
			image = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
		}
	}
	fs.syncHook.Store(&cut)
	w, err := s.Write(t.Context(), mine("mine", 5))
	if err != nil {
		t.Fatal(err)
	}
	fs.syncHook.Store(nil)
	if got := s.segs.tailNow().off; got != t3+idsFrame+blockFrame {
		t.Fatalf("setup: the frames end at %d, want %d", got, t3+idsFrame+blockFrame)
	}
	ref := segmentRef(t, s, w.Index)
	s.Close()
	// The pages the block is in reached the disk; the other pages of the
	// ID frame did not.
	blockFirstPage, blockEndPage := (ref.off-frameHeader)/page*page, (ref.end()+page-1)/page*page
	f, err := image.OpenReadWrite(image.PathJoin(o.Dir, segName(ref.seq)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	is, ie := t3+idsAt, t3+idsAt+idsFrame
	for _, r := range [][2]int64{{is, min(ie, blockFirstPage)}, {max(is, blockEndPage), ie}} {
		if r[1] > r[0] {
			if _, err := f.WriteAt(make([]byte, r[1]-r[0]), r[0]); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Close()

	o.FS = image
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	v, _, _ := get(t, s2, "k")
	if v != string(pattern(5, valueLen)) {
		// Not replayed: the write is lost as a whole, and its retry
		// applies it afresh.
		again, err := s2.Write(t.Context(), mine("mine", 5))
		if err != nil || again.Duplicate || !again.Changed {
			t.Fatalf("the retry of a write that was not replayed: %+v %v", again, err)
		}
		return
	}
	// The write appears (its answer was lost); another client then sets
	// k, and the first client retries its batch.
	expectRetryDuplicate(t, s2, mine("mine", 5), "k")
}

// TestSegmentDamagedHeaderKeepsLaterSegments: after a power loss that Pebble's
// unsynced batches did not survive, the replay walks the segments from the
// first, each next segment's header saying where the previous one's
// blocks end. A header that is damaged (a bad disk block) is taken for
// the header of a segment whose creation a crash cut short: the replay
// ends in the segment before it, and the open removes that segment and
// every later one, which hold acknowledged writes. Neither the open nor
// verify says anything is wrong. A segment after it with a whole header
// cannot follow a creation cut short (a segment is created only once the
// one before has its header synced): it is corruption, and the store
// should refuse to open, as it does for a damaged block below a synced
// end.
func TestSegmentDamagedHeaderKeepsLaterSegments(t *testing.T) {
	t.Parallel()
	var seqs []uint64
	o := powerLossImage(t, "seg-bad-header", 20, 16<<10, func(s *Store, _ []WriteResult) {
		var err error
		if seqs, err = s.segs.list(); err != nil || len(seqs) < 4 {
			t.Fatalf("setup: segments %v (%v), want at least 4", seqs, err)
		}
	})
	// A byte of the header's contents: its frame no longer matches its CRC.
	damageSegment(t, o, seqs[2], frameHeader+2, []byte{0xff})
	expectRefused(t, o, "a damaged header before later segments")
}

// TestSegmentDamagedBlockInLastSegment: after a power loss that Pebble's
// unsynced batches did not survive, the replay reads the open segment's
// blocks, which no later header declares synced. A block damaged in the
// middle of it (a bad disk block) is taken for the end of what was
// written: the replay ends there, the acknowledged writes in the blocks
// after it are dropped, and the next write overwrites them. Verify says
// nothing. A torn write is the last thing in a segment: a whole block
// after the damaged frame that is later in the log shows damage, and the
// store should refuse to open.
func TestSegmentDamagedBlockInLastSegment(t *testing.T) {
	t.Parallel()
	var ref blockRef
	o := powerLossImage(t, "seg-bad-block", 10, 0, func(s *Store, writes []WriteResult) {
		ref = segmentRef(t, s, writes[3].Index)
		if last := segmentRef(t, s, writes[9].Index); last.seq != ref.seq {
			t.Fatal("setup: the blocks are not in one segment")
		}
	})
	damageSegment(t, o, ref.seq, ref.off+int64(ref.n)/2, []byte("XX"))
	expectRefused(t, o, "a damaged block followed by later blocks")
}

// TestSegmentOldIDFrameOrder: format 1 segments written before the batch
// ID frame went before its block have it after the block; a replay still
// restores those outcomes.
func TestSegmentOldIDFrameOrder(t *testing.T) {
	t.Parallel()
	mem := vfs.NewCrashableMem()
	o := crashOptions("seg-old-ids", mem)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	a := mustWrite(t, s, set("a", "1"))
	// The segment's header rewritten as format 1's.
	seq := s.segs.tailNow().seq
	h, ok, err := s.segs.frameAt(seq, 0)
	if err != nil || !ok || string(h[:len(segMagic)+1]) != segMagic+"2" {
		t.Fatalf("segment header %q, %v, %v", h, ok, err)
	}
	h = append([]byte(nil), h...)
	h[len(segMagic)] = '1'
	old := binary.LittleEndian.AppendUint32(nil, uint32(len(h)))
	old = binary.LittleEndian.AppendUint32(old, crc32.Checksum(h, castagnoli))
	if _, err := s.segs.cur.WriteAt(append(old, h...), 0); err != nil {
		t.Fatal(err)
	}
	// The next block and its outcomes, framed in the old order, appended
	// and synced behind the committer's back (it is idle): as a power
	// loss right after the old build's fdatasync would leave them.
	head := appliedHash(t, s)
	e := wal.Entry{Index: a.Index + 1, Time: head.time + 1, Kind: wal.KindData, Ops: []wal.Op{set("k", "v")}}
	var b wal.BlockBuilder
	b.AddEntry(&e, head.hash, true)
	hdr, payload := b.Parts(nil, wal.CompressNone)
	blk := append(append([]byte(nil), hdr...), payload...)
	frame := func(body []byte) []byte {
		f := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
		f = binary.LittleEndian.AppendUint32(f, crc32.Checksum(body, castagnoli))
		return append(f, body...)
	}
	ids := encodeIDs(nil, e.Index, map[string]batchOutcome{"old": {index: e.Index, time: e.Time, changed: true}})
	binary.LittleEndian.PutUint32(ids[idsCRCAt:], crc32.Checksum(blk, castagnoli))
	tail := s.segs.tailNow()
	if _, err := s.segs.cur.WriteAt(append(frame(blk), frame(ids)...), tail.off); err != nil {
		t.Fatal(err)
	}
	if err := s.segs.cur.SyncData(); err != nil {
		t.Fatal(err)
	}
	s2 := crashReopen(t, s, mem, o)
	if v, _, ok := get(t, s2, "k"); !ok || v != "v" {
		t.Fatalf("the block was not replayed: k = %q", v)
	}
	again, err := s2.Write(t.Context(), Batch{ID: []byte("old"), Ops: []wal.Op{set("k", "v2")}})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Index != e.Index {
		t.Fatalf("the outcome after the block was not restored: %+v", again)
	}
	mustVerify(t, s2)
}

// TestSegmentDamagedFirstHeader: when Pebble has no record of the
// segment tail (a power loss before its first background sync), the
// replay starts at the first segment's first block, found through its
// header. A damaged header there was taken for a segment whose creation
// a crash cut short: the replay was skipped and the open removed every
// segment, with every acknowledged write. A later segment shows it is
// damage: the store should refuse to open.
func TestSegmentDamagedFirstHeader(t *testing.T) {
	t.Parallel()
	var seqs []uint64
	o := powerLossImage(t, "seg-bad-first-header", 20, 16<<10, func(s *Store, _ []WriteResult) {
		var err error
		if seqs, err = s.segs.list(); err != nil || len(seqs) < 2 {
			t.Fatalf("setup: segments %v (%v), want at least 2", seqs, err)
		}
	})
	damageSegment(t, o, seqs[0], frameHeader+2, []byte{0xff})
	expectRefused(t, o, "a damaged first header")
}
