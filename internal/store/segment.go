package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Log segments hold the log blocks of durable commits, so that each value
// is written to disk once (docs/storage.md, "Log segments"). The committer
// appends a group's block to the open segment and fdatasyncs it: that is
// the commit's durability point. Pebble then gets the block's key with a
// reference (segment, offset, length) instead of the block, in a batch
// written without sync. Pebble may therefore lose a tail of commits in a
// power loss, never more: at the next open, the blocks after the last one
// Pebble holds are read back from the segments and applied again.
//
// A segment is a file qslog-<seq>.seg in the database directory, a series
// of frames:
//
//	frame := length(4 LE) crc32c(4 LE) block
//
// where block is a log block as wal.BlockBuilder encodes it, and the CRC
// covers it. A reference points at the block, after the frame header. A
// block whose group recorded batch ID outcomes (idempotent writes) is
// preceded by a frame of them (idsTag, then the outcomes; encodeIDs), so
// that a replay restores them with the block (format 1 segments may have
// it after the block, which a replay still reads). The first frame of a
// segment is its header instead: segMagic and the format version (one
// digit, segFormat), then where the previous segment's blocks end (seq
// and offset, uvarints). Written and synced before any
// block, it tells a replay to stop reading the previous segment there,
// before frames whose write failed and that were abandoned.
//
// Segments are made of spares where possible (a removed segment, or zeros
// written ahead), so that appends overwrite and their fdatasyncs write no
// metadata; they are never rewritten below their synced tail. A segment
// is removed once no block key points into it (its use count, segUse, is
// gone) and Pebble's state saying so is durable (segmentLoop).

const (
	segPrefix = "qslog-"
	segSuffix = ".seg"
	// frameHeader is the length and CRC before each block.
	frameHeader = 8
	// minSegmentBytes and maxSegmentBytes bound the size a segment is
	// preallocated to (segmentSize); a segment is sealed when the next
	// block would not fit. A store's first segment is a sixteenth of it
	// (nextCapacity).
	minSegmentBytes = 4 << 20
	maxSegmentBytes = 64 << 20
	// blockRefTag starts a block key's value that is a reference; a block
	// stored in Pebble starts with its version byte, which is never 0.
	blockRefTag = 0
	// segMagic and the format version start a segment's header. Format
	// 1 segments may hold a block's batch ID frame before or after it
	// (the order changed within format 1); format 2 segments have it
	// before it only.
	segMagic  = "QSSEG"
	segFormat = 2
)

func segName(seq uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, seq, segSuffix) }

func parseSegName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
		return 0, false
	}
	seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 10, 64)
	return seq, err == nil && seq > 0
}

// blockRef says where a log block is: in segment seq, n bytes at off, its
// payload (the entries) starting payloadAt bytes in.
type blockRef struct {
	seq       uint64
	off       int64
	n         int
	payloadAt int
}

func (r blockRef) end() int64 { return r.off + int64(r.n) }

func (r blockRef) encode(dst []byte) []byte {
	dst = append(dst, blockRefTag)
	dst = binary.AppendUvarint(dst, r.seq)
	dst = binary.AppendUvarint(dst, uint64(r.off))
	dst = binary.AppendUvarint(dst, uint64(r.n))
	return binary.AppendUvarint(dst, uint64(r.payloadAt))
}

// decodeBlockRef decodes the value of a block key: ok is false if it is a
// block stored in Pebble.
func decodeBlockRef(v []byte) (r blockRef, ok bool, err error) {
	if len(v) == 0 || v[0] != blockRefTag {
		return blockRef{}, false, nil
	}
	var f [4]uint64
	p := v[1:]
	for i := range f {
		x, n := binary.Uvarint(p)
		if n <= 0 {
			return blockRef{}, true, fmt.Errorf("%w: bad log block reference %x", ErrCorrupt, v)
		}
		f[i], p = x, p[n:]
	}
	if len(p) != 0 || f[0] == 0 || f[1] > 1<<62 || f[2] > 1<<31 || f[3] > f[2] {
		return blockRef{}, true, fmt.Errorf("%w: bad log block reference %x", ErrCorrupt, v)
	}
	return blockRef{seq: f[0], off: int64(f[1]), n: int(f[2]), payloadAt: int(f[3])}, true, nil
}

// segTail is where the next block goes: recorded under metaSegments in
// every batch that references a newly appended block.
type segTail struct {
	seq uint64
	off int64
}

func (t segTail) encode() []byte {
	b := binary.AppendUvarint(nil, t.seq)
	return binary.AppendUvarint(b, uint64(t.off))
}

func decodeSegTail(v []byte) (segTail, error) {
	seq, n := binary.Uvarint(v)
	if n <= 0 {
		return segTail{}, fmt.Errorf("%w: bad segment tail %x", ErrCorrupt, v)
	}
	off, m := binary.Uvarint(v[n:])
	if m <= 0 || n+m != len(v) || off > 1<<62 {
		return segTail{}, fmt.Errorf("%w: bad segment tail %x", ErrCorrupt, v)
	}
	return segTail{seq: seq, off: int64(off)}, nil
}

// readGate lets the segment collector wait for the readers that may hold
// a Pebble view older than the batch that dropped the last reference to a
// segment. A reader enters before it opens its view and leaves after
// closing it. The collector flips the epoch, then waits for the readers
// of the previous one: every reader that enters after the flip opens a
// view that no longer references the segment.
type readGate struct {
	epoch  atomic.Uint64
	active [2]atomic.Int64
}

func (g *readGate) enter() uint64 {
	e := g.epoch.Load()
	g.active[e&1].Add(1)
	return e
}

func (g *readGate) leave(e uint64) { g.active[e&1].Add(-1) }

// quiesce flips the epoch and waits, at most wait, for the readers that
// entered before. It reports whether they all left. Only one goroutine
// calls it at a time.
func (g *readGate) quiesce(wait time.Duration, quit <-chan struct{}) bool {
	e := g.epoch.Load()
	deadline := time.Now().Add(wait)
	// The slot of the epoch after e is reused: wait for the readers left
	// in it from two flips ago before flipping into it.
	for g.active[(e+1)&1].Load() != 0 {
		if !napUntil(deadline, quit) {
			return false
		}
	}
	g.epoch.Store(e + 1)
	for g.active[e&1].Load() != 0 {
		if !napUntil(deadline, quit) {
			return false
		}
	}
	return true
}

func napUntil(deadline time.Time, quit <-chan struct{}) bool {
	if time.Now().After(deadline) {
		return false
	}
	select {
	case <-quit:
		return false
	case <-time.After(100 * time.Microsecond):
		return true
	}
}

// segments is the set of segment files of one store. The committer
// appends and syncs; readers read through the files map; the collector
// and checkpoints hold mu.
type segments struct {
	fs    vfs.FS
	dir   string
	size  int64
	m     *storeMetrics
	files atomic.Pointer[map[uint64]vfs.File] // copy on write, under mu

	mu     sync.Mutex
	cur    vfs.File // open for appends; nil until the first append
	curSeq uint64   // the newest segment (cur's, once open)
	tail   int64    // where the next frame goes in curSeq
	// capacity of curSeq (the size it was made for); 0 before the first
	capacity int64
	start    int64 // where curSeq's first block goes (after its header)
	synced   int64 // durable end of curSeq
	// pending: a group's frames were appended (at pendingAt in curSeq)
	// and it is not yet committed (done) or failed.
	pending   bool
	pendingAt int64
	// settled counts the groups done or failed; settledCond (on mu) is
	// signalled with each, for a checkpoint waiting for one (copyInto).
	settled     uint64
	settledCond sync.Cond
	// sealed: curSeq takes no more blocks. A rotation that failed after
	// writing the next segment's header may leave that header durable
	// (the file's removal is not), saying curSeq's blocks end at synced: a
	// replay stops there, so a block appended after it would be lost.
	sealed bool
	// haveSpare: spareName exists, ready to be the next segment.
	haveSpare     bool
	recycleAnyway bool // Options.recycleAnyway
	buf           []byte
}

// segmentSize is the size of the segments of a log whose retention caps
// its blocks at maxBytes (no cap if ≤ 0): a 64th of the cap, in whole
// MiB, between minSegmentBytes and maxSegmentBytes. The log's files
// exceed its blocks by about two segments (the open one's unwritten
// tail, the spare, the dropped blocks of the oldest), so at a 64th that
// is a few percent of the cap, where a fixed 64 MiB made it an eighth of
// a 1 GiB log and the whole of a 128 MiB one.
func segmentSize(maxBytes int64) int64 {
	if maxBytes <= 0 {
		return maxSegmentBytes
	}
	return min(max(maxBytes/64&^(1<<20-1), minSegmentBytes), maxSegmentBytes)
}

func newSegments(fs vfs.FS, dir string, size int64, m *storeMetrics) *segments {
	g := &segments{fs: fs, dir: dir, size: size, m: m}
	g.settledCond.L = &g.mu
	empty := map[uint64]vfs.File{}
	g.files.Store(&empty)
	return g
}

// list returns the sequence numbers of the segment files in the directory,
// in order.
func (g *segments) list() ([]uint64, error) {
	names, err := g.fs.List(g.dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseSegName(n); ok {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs, nil
}

// openAll opens every segment file for reading.
func (g *segments) openAll() error {
	seqs, err := g.list()
	if err != nil {
		return err
	}
	_, err = g.fs.Stat(g.fs.PathJoin(g.dir, spareName))
	g.haveSpare = err == nil
	files := map[uint64]vfs.File{}
	for _, seq := range seqs {
		f, err := g.fs.Open(g.fs.PathJoin(g.dir, segName(seq)))
		if err != nil {
			closeFiles(files)
			return err
		}
		files[seq] = f
	}
	g.files.Store(&files)
	if len(seqs) > 0 {
		g.curSeq = seqs[len(seqs)-1]
	}
	g.m.segments.Set(float64(len(files)))
	return nil
}

// dropLargeSpare removes a spare larger than a segment (made before the
// log's cap was lowered): a segment of it would keep the excess for its
// whole life. Only a writable store calls it.
func (g *segments) dropLargeSpare() {
	spare := g.fs.PathJoin(g.dir, spareName)
	if st, err := g.fs.Stat(spare); err == nil && st.Size() > g.size && g.fs.Remove(spare) == nil {
		g.haveSpare = false
	}
}

func closeFiles(files map[uint64]vfs.File) {
	for _, f := range files {
		f.Close()
	}
}

func (g *segments) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	if g.cur != nil {
		err = g.cur.Close()
		g.cur = nil
	}
	closeFiles(*g.files.Load())
	empty := map[uint64]vfs.File{}
	g.files.Store(&empty)
	return err
}

// setFile adds or removes (f nil) a file of the map; called with mu held.
func (g *segments) setFile(seq uint64, f vfs.File) {
	files := maps.Clone(*g.files.Load())
	if f == nil {
		delete(files, seq)
	} else {
		files[seq] = f
	}
	g.files.Store(&files)
	g.m.segments.Set(float64(len(files)))
}

// resume makes the committer continue appending at t, in the file that
// holds it (a recovered tail). Files after it hold nothing referenced or
// replayable and are removed.
func (g *segments) resume(t segTail) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	seqs, err := g.list()
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		if seq > t.seq {
			if f := (*g.files.Load())[seq]; f != nil {
				f.Close()
			}
			g.setFile(seq, nil)
			if err := g.fs.Remove(g.fs.PathJoin(g.dir, segName(seq))); err != nil {
				return err
			}
			g.m.segmentsRemoved.Inc()
		}
	}
	if t.seq == 0 {
		return nil
	}
	_, start, ok, err := g.header(t.seq)
	if err == nil && !ok {
		err = fmt.Errorf("%w: no header", ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("log segment %d holding the log tail: %w", t.seq, err)
	}
	f, err := g.fs.OpenReadWrite(g.fs.PathJoin(g.dir, segName(t.seq)), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("%w: log segment %d holding the log tail: %v", ErrCorrupt, t.seq, err)
	}
	g.cur, g.curSeq, g.tail, g.synced, g.start = f, t.seq, t.off, t.off, start
	g.capacity = g.size // unknown: as large as segments get
	return nil
}

// next is where the next block of n bytes goes; it opens a new segment
// when there is none or the block does not fit in the current one.
// Called by the committer only.
func (g *segments) next(n int) (segTail, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur != nil && !g.sealed && (g.tail == g.start || g.tail+int64(frameHeader+n) <= g.capacity) {
		return segTail{seq: g.curSeq, off: g.tail}, nil
	}
	return g.rotate(n)
}

// rotate opens the next segment, its header saying where the current
// one's blocks end (its synced tail), for a first block of n bytes.
// Called with mu held.
func (g *segments) rotate(n int) (segTail, error) {
	seq := g.curSeq + 1
	name := g.fs.PathJoin(g.dir, segName(seq))
	hdr := segHeader(g.curSeq, g.synced)
	// A spare (a removed segment, or zeros written in the background) is
	// overwritten in place: an fdatasync then writes data only, no block
	// allocation, which on this kind of disk costs a third less.
	capacity := max(g.nextCapacity(), int64(len(hdr)+frameHeader+n))
	f, err := g.takeSpare(name)
	if f == nil && err == nil {
		if f, err = g.fs.Create(name, vfs.WriteCategoryUnspecified); err != nil {
			return segTail{}, err
		}
		err = f.Preallocate(0, capacity)
	}
	if err == nil {
		_, err = f.WriteAt(hdr, 0)
		g.sealed = true // until the new segment is in use (see sealed)
	}
	if err == nil {
		err = f.SyncData()
	}
	if err == nil {
		err = syncDir(g.fs, g.dir)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		g.fs.Remove(name)
		return segTail{}, err
	}
	r, err := g.fs.Open(name)
	if err != nil {
		f.Close()
		g.fs.Remove(name)
		return segTail{}, err
	}
	g.sealed = false
	if g.cur != nil {
		g.cur.Close() // its reader stays in files
	}
	g.setFile(seq, r)
	at := int64(len(hdr))
	g.cur, g.curSeq, g.tail, g.synced, g.start = f, seq, at, at, at
	g.capacity = capacity
	g.m.segmentsCreated.Inc()
	return segTail{seq: seq, off: at}, nil
}

// rotationBytes is the space the next segment is preallocated to (at
// least: a larger first block makes it larger).
func (g *segments) rotationBytes() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nextCapacity()
}

// nextCapacity is the size of the next segment: a store's first is small,
// and each next one twice the last, up to size, so that a database that
// is written little takes little disk (4 MiB, not 64).
func (g *segments) nextCapacity() int64 {
	if g.capacity == 0 {
		return max(g.size/16, 1)
	}
	return min(g.size, 2*g.capacity)
}

// segHeader is the first frame of a segment that follows the blocks of
// segment prev, which end at end.
func segHeader(prev uint64, end int64) []byte {
	b := append(make([]byte, frameHeader), segMagic...)
	b = append(b, '0'+segFormat)
	b = binary.AppendUvarint(b, prev)
	b = binary.AppendUvarint(b, uint64(end))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)-frameHeader))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[frameHeader:], castagnoli))
	return b
}

// header reads the header of segment seq: where the previous segment's
// blocks end, and where this one's start. ok is false if the segment has
// no whole header (a crash while it was being created): it holds nothing.
func (g *segments) header(seq uint64) (prev segTail, start int64, ok bool, err error) {
	b, ok, err := g.frameAt(seq, 0)
	if err != nil || !ok {
		return segTail{}, 0, false, err
	}
	_, t, err := decodeSegHeader(b)
	if err != nil {
		return segTail{}, 0, false, fmt.Errorf("log segment %d header: %w", seq, err)
	}
	return t, int64(frameHeader + len(b)), true, nil
}

// decodeSegHeader decodes the body of a segment's header frame: its
// format version and where the previous segment's blocks end.
func decodeSegHeader(b []byte) (format int, prev segTail, err error) {
	if len(b) < len(segMagic)+1 || !strings.HasPrefix(string(b), segMagic) {
		return 0, segTail{}, fmt.Errorf("%w: no segment header", ErrCorrupt)
	}
	format = int(b[len(segMagic)]) - '0'
	if format < 1 || format > segFormat {
		return 0, segTail{}, fmt.Errorf("%w: segment format %q is not one this build reads (1 to %d)", ErrCorrupt, b[len(segMagic)], segFormat)
	}
	prev, err = decodeSegTail(b[len(segMagic)+1:])
	return format, prev, err
}

// format returns the format version of segment seq: 1 when its header
// is not whole (the format that reads every frame order).
func (g *segments) format(seq uint64) (int, error) {
	b, ok, err := g.frameAt(seq, 0)
	if err != nil || !ok {
		return 1, err
	}
	format, _, err := decodeSegHeader(b)
	if err != nil {
		return 1, nil // header reports it where it matters
	}
	return format, nil
}

// append writes one frame holding the block hdr+payload at the tail,
// after a frame holding trailer if there is one (the group's batch ID
// outcomes), in one write. It returns the block's reference and where the
// next frame goes. It is durable only after sync.
func (g *segments) append(hdr, payload, trailer []byte) (blockRef, int64, error) {
	n := len(hdr) + len(payload)
	need := n
	if len(trailer) > 0 {
		need += frameHeader + len(trailer)
	}
	at, err := g.next(need)
	if err != nil {
		return blockRef{}, 0, err
	}
	g.mu.Lock()
	g.pending, g.pendingAt = true, at.off // next made at.seq current
	g.mu.Unlock()
	// The outcomes first: a replay applies a block only with the frame
	// before it whole, so a power loss that keeps the block cannot lose
	// them. They name the block by its frame's CRC (see encodeIDs).
	blockCRC := crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, payload)
	g.buf = g.buf[:0]
	if len(trailer) > 0 {
		binary.LittleEndian.PutUint32(trailer[idsCRCAt:], blockCRC)
		g.buf = append(append(g.buf, make([]byte, frameHeader)...), trailer...)
		binary.LittleEndian.PutUint32(g.buf[0:], uint32(len(trailer)))
		binary.LittleEndian.PutUint32(g.buf[4:], crc32.Checksum(trailer, castagnoli))
	}
	blockAt := len(g.buf)
	g.buf = append(g.buf, make([]byte, frameHeader)...)
	g.buf = append(append(g.buf, hdr...), payload...)
	binary.LittleEndian.PutUint32(g.buf[blockAt:], uint32(n))
	binary.LittleEndian.PutUint32(g.buf[blockAt+4:], blockCRC)
	if _, err := g.cur.WriteAt(g.buf, at.off); err != nil {
		return blockRef{}, 0, err
	}
	end := at.off + int64(len(g.buf))
	g.mu.Lock()
	g.tail = end
	g.mu.Unlock()
	g.m.segmentBytes.Add(float64(len(g.buf)))
	return blockRef{seq: at.seq, off: at.off + int64(blockAt) + frameHeader, n: n, payloadAt: len(hdr)}, end, nil
}

// sync makes every appended frame durable.
func (g *segments) sync() error {
	start := time.Now()
	err := g.cur.SyncData()
	g.m.segmentSyncSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.synced = g.tail
	g.mu.Unlock()
	return nil
}

// done is called once the group whose frames were appended is committed:
// they are part of the log.
func (g *segments) done() {
	g.mu.Lock()
	g.pending = false
	g.settle()
	g.mu.Unlock()
}

// settle records that the group in flight is done or failed. Called with
// mu held.
func (g *segments) settle() {
	g.settled++
	g.settledCond.Broadcast()
}

// fail is called when a group that appended frames failed (the write, its
// sync, or Pebble's batch after it): its frames are abandoned, even if
// they reached the disk, and the next block, which takes the same index,
// goes to a new segment (a file whose write-back failed cannot be
// trusted to say so again). The new segment is opened now: its header,
// saying the current segment's blocks end before the abandoned frames, is
// what keeps a replay from applying them. If it cannot be opened (a full
// disk), the abandoned frames' first header is erased in place instead,
// which needs no new space, and the next append tries a new segment
// again. Only if that fails too may a restart replay the abandoned block
// (whole: a write that failed then appears, as a write whose answer was
// lost would).
func (g *segments) fail() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.pending {
		return // nothing was appended
	}
	g.pending = false
	defer g.settle() // after the rotation: the segment is sealed short of the group
	g.m.segmentFailures.Inc()
	g.tail, g.synced = g.pendingAt, g.pendingAt
	if _, err := g.rotate(0); err != nil && g.cur != nil {
		// A frame of length 0 is no frame: a replay ends there.
		if _, err := g.cur.WriteAt(make([]byte, frameHeader), g.pendingAt); err == nil {
			g.cur.SyncData()
		}
		g.cur.Close()
		g.cur = nil
	}
}

// read returns the block r points to, appended to dst, checking its
// frame: length and CRC.
func (g *segments) read(r blockRef, dst []byte) ([]byte, error) {
	if r.off < frameHeader {
		return nil, fmt.Errorf("%w: log block reference to offset %d of segment %d", ErrCorrupt, r.off, r.seq)
	}
	start := len(dst)
	dst, err := g.readAt(r.seq, r.off-frameHeader, frameHeader+r.n, dst)
	if err != nil {
		return nil, err
	}
	h, blk := dst[start:start+frameHeader], dst[start+frameHeader:]
	if int(binary.LittleEndian.Uint32(h)) != r.n || crc32.Checksum(blk, castagnoli) != binary.LittleEndian.Uint32(h[4:]) {
		return nil, fmt.Errorf("%w: log segment %d: block at %d fails its frame check", ErrCorrupt, r.seq, r.off)
	}
	return append(dst[:start], blk...), nil
}

func (g *segments) readAt(seq uint64, off int64, n int, dst []byte) ([]byte, error) {
	f := (*g.files.Load())[seq]
	if f == nil {
		return nil, fmt.Errorf("%w: log segment %d is missing", ErrCorrupt, seq)
	}
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	if _, err := f.ReadAt(dst[start:], off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: log segment %d ends before %d+%d", ErrCorrupt, seq, off, n)
		}
		return nil, err
	}
	return dst, nil
}

// frameAt reads the frame at off in segment seq. ok is false when there is
// no whole frame with a matching CRC there: the end of what was written.
func (g *segments) frameAt(seq uint64, off int64) (block []byte, ok bool, err error) {
	f := (*g.files.Load())[seq]
	if f == nil {
		return nil, false, nil
	}
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	var h [frameHeader]byte
	if off+frameHeader > st.Size() {
		return nil, false, nil
	}
	if _, err := f.ReadAt(h[:], off); err != nil {
		return nil, false, err
	}
	n := int64(binary.LittleEndian.Uint32(h[0:]))
	if n == 0 || off+frameHeader+n > st.Size() {
		return nil, false, nil
	}
	block = make([]byte, n)
	if _, err := f.ReadAt(block, off+frameHeader); err != nil {
		return nil, false, err
	}
	if crc32.Checksum(block, castagnoli) != binary.LittleEndian.Uint32(h[4:]) {
		return nil, false, nil
	}
	return block, true, nil
}
