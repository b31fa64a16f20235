package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Kinds of Problem found by Verify. They are stable: tools may match on them.
const (
	ProblemMeta         = "meta"          // a metadata record is missing or undecodable
	ProblemKeyspace     = "keyspace"      // a key outside the known keyspaces, or a malformed key
	ProblemValueRecord  = "value_record"  // a value record fails its CRC or does not decode
	ProblemValueIndex   = "value_index"   // a value record's index is 0 or above the applied index
	ProblemValue        = "value"         // a chunked or in-log value's length or CRC is wrong, or its log block is gone
	ProblemChunk        = "chunk"         // a chunk fails its CRC
	ProblemChunkMissing = "chunk_missing" // chunks a record counts are not stored
	ProblemChunkOrphan  = "chunk_orphan"  // chunks no record refers to
	ProblemLogMeta      = "log_meta"      // the log record disagrees with the blocks or the applied record
	ProblemLogBlock     = "log_block"     // a log block does not decode or holds the wrong entries
	ProblemLogGap       = "log_gap"       // log entries are missing, stale or beyond the applied index
	ProblemLogChain     = "log_chain"     // an entry's hash does not chain from the previous one
	ProblemApplied      = "applied"       // the applied record disagrees with the last log entry
	ProblemStats        = "stats"         // the stats record disagrees with a recount
	ProblemRetired      = "retired"       // a retired log block's record disagrees with the values pointing into it, or its block is gone
	ProblemEngine       = "engine"        // the storage engine reported corruption
	ProblemHistory      = "history"       // an MVCC history entry is malformed, corrupt, unpaired or miscounted
	ProblemProxy        = "proxy"         // a proxy's cache counters disagree with a recount
	ProblemSummary      = "block_summary" // a log block's summary does not decode, disagrees with its block, or has no block in the log
	ProblemSegment      = "segment"       // a log segment's use record disagrees with the block keys pointing into it
	ProblemBatchID      = "batch_id"      // an idempotent batch's outcome does not decode or has no time record (it would never expire)
)

// verifyMaxProblems bounds VerifyReport.Problems; ProblemCount keeps
// counting past it.
const verifyMaxProblems = 1000

// Problem is one integrity failure, located as exactly as Verify can.
type Problem struct {
	Kind   string
	Key    []byte // the data key concerned, if any
	Index  uint64 // the log index concerned, if any (0: none)
	Chunk  int    // the chunk number concerned, or -1
	Detail string // what was expected and what was found
}

func (p Problem) String() string {
	var b bytes.Buffer
	b.WriteString(p.Kind)
	if p.Key != nil {
		fmt.Fprintf(&b, " key %q", p.Key)
	}
	if p.Chunk >= 0 {
		fmt.Fprintf(&b, " chunk %d", p.Chunk)
	}
	if p.Index != 0 {
		fmt.Fprintf(&b, " index %d", p.Index)
	}
	b.WriteString(": ")
	b.WriteString(p.Detail)
	return b.String()
}

// VerifyReport is what Verify counted and found.
type VerifyReport struct {
	Dir  string
	Name string
	DBID DBID

	AppliedIndex uint64
	AppliedHash  wal.Hash

	// Recounted from the data keyspace.
	Keys          int64
	KeyBytes      int64
	ValueBytes    int64 // as the value records state them
	ChunkedValues int64
	InLogValues   int64 // values stored only in their log block
	Chunks        int64 // chunks belonging to a record
	ChunkBytes    int64
	OrphanChunks  int64

	// The retained log as found.
	LogFirst   uint64
	LogBlocks  int64
	LogEntries int64
	LogBytes   int64 // stored bytes, counted like the log record counts them

	// Log blocks before the log start kept for their live values.
	RetiredBlocks int64
	RetiredBytes  int64

	// The segment tail: blocks in the log segments after the last one
	// the engine records, which a crash left and the next open applies.
	TailBlocks  int64
	TailEntries int64

	// Problems holds the first problems found; ProblemCount counts all.
	Problems     []Problem
	ProblemCount int
}

// Clean reports whether no problem was found.
func (r *VerifyReport) Clean() bool { return r.ProblemCount == 0 }

func (r *VerifyReport) add(p Problem) {
	r.ProblemCount++
	if len(r.Problems) < verifyMaxProblems {
		r.Problems = append(r.Problems, p)
	}
}

// Verify opens the database in o.Dir read-only (o.ReadOnly is forced) and
// checks it; see (*Store).Verify. It fails if the database cannot be opened,
// for example because a server holds it (its lock) or its metadata is
// unreadable (the error wraps ErrCorrupt then).
func Verify(o Options) (*VerifyReport, error) {
	o.ReadOnly = true
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	rep, err := s.Verify()
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return rep, err
}

// Verify checks the whole database at one consistent point (a snapshot)
// and reports what it counted and every integrity problem found:
//
//   - every value record's CRC, and its index against the applied index;
//   - every chunk's CRC, chunks missing from a chunked value, its length and
//     whole-value CRC, and chunks no record refers to;
//   - the log: every block decodes and holds consecutive entries, entries
//     are contiguous from the log record's first index, the hash chain runs
//     from the stored base hash to the applied record's index and hash, and
//     the log record's byte count matches the blocks;
//   - the stats record against a recount of keys, key bytes, value bytes;
//   - retired log blocks: each has a record whose live count and bytes
//     match the in-log records and history versions pointing into it,
//     and the totals match;
//   - the segment tail a crash left (segmentTail): the blocks the next
//     open replays, counted, and damage where a replay must not stop;
//   - the outcomes of idempotent batches: each decodes and has its time
//     record.
//
// It streams: memory use is bounded by one log block and one chunk, not the
// database size. An error is returned only when the check itself could not
// run (I/O); everything wrong with the data is a Problem.
func (s *Store) Verify() (*VerifyReport, error) {
	s.engine.RLock()
	defer s.engine.RUnlock()
	e := s.gate.enter()
	defer s.gate.leave(e)
	snap := s.db.NewSnapshot()
	defer snap.Close()
	v := &verifier{s: s, snap: snap, r: &VerifyReport{Dir: s.opts.Dir, Name: s.opts.Name, DBID: s.dbid}}
	steps := []func() error{v.meta, v.keyspaces, v.data, v.orphans, v.log, v.segmentTail, v.stats, v.history, v.retiredBlocks, v.proxy, v.batchIDs}
	for _, step := range steps {
		if err := step(); err != nil {
			if pebble.IsCorruptionError(err) {
				v.r.add(Problem{Kind: ProblemEngine, Chunk: -1, Detail: engineErr(err).Error()})
				continue
			}
			return nil, fmt.Errorf("verify %s: %w", s.opts.Name, err)
		}
	}
	return v.r, nil
}

type verifier struct {
	s    *Store
	snap *pebble.Snapshot
	r    *VerifyReport

	applied    appliedRecord
	appliedOK  bool
	logRec     logRecord
	logOK      bool
	statsRec   statsRecord
	statsOK    bool
	unreadable int64 // value records whose length is unknown
	// Values stored here (not remote), for a proxy's counters.
	storedValues, storedBytes int64

	retired       map[uint64]retiredRecord // retired block records
	retiredTotals []byte                   // the totals record, nil if none
	refs          map[uint64]retiredRecord // in-log records per block before the log start
	seenRetired   map[uint64]int64         // retired blocks found, and their size

	// summaries iterates the log block summaries (summary.go) in step
	// with the log blocks; sumOK: it is positioned on one.
	summaries *pebble.Iterator
	sumOK     bool
}

func (v *verifier) problem(kind string, key []byte, index uint64, chunk int, format string, args ...any) {
	var k []byte
	if key != nil {
		k = append([]byte{}, key...)
	}
	v.r.add(Problem{Kind: kind, Key: k, Index: index, Chunk: chunk, Detail: fmt.Sprintf(format, args...)})
}

// get returns a copy of the value of key, or nil if it is missing.
func (v *verifier) get(key []byte) ([]byte, error) {
	val, c, err := v.snap.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return append([]byte{}, val...), nil
}

func (v *verifier) meta() error {
	id, err := v.get(metaDBID)
	if err != nil {
		return err
	}
	if len(id) != len(DBID{}) {
		v.problem(ProblemMeta, nil, 0, -1, "database id record is %d bytes, want %d", len(id), len(DBID{}))
	}
	if f, err := v.get(metaFormat); err != nil {
		return err
	} else if !knownFormat(f) {
		v.problem(ProblemMeta, nil, 0, -1, "storage format record is %x, want %02x", f, formatVersion)
	}
	decode := func(key []byte, what string, dec func([]byte) error) (bool, error) {
		b, err := v.get(key)
		if err != nil {
			return false, err
		}
		if b == nil {
			v.problem(ProblemMeta, nil, 0, -1, "%s record missing", what)
			return false, nil
		}
		if err := dec(b); err != nil {
			v.problem(ProblemMeta, nil, 0, -1, "%s record: %v", what, err)
			return false, nil
		}
		return true, nil
	}
	if v.appliedOK, err = decode(metaApplied, "applied", func(b []byte) (err error) {
		v.applied, err = decodeApplied(b)
		return err
	}); err != nil {
		return err
	}
	if v.logOK, err = decode(metaLog, "log", func(b []byte) (err error) {
		v.logRec, err = decodeLogRecord(b)
		return err
	}); err != nil {
		return err
	}
	if v.statsOK, err = decode(metaStats, "stats", func(b []byte) (err error) {
		v.statsRec, err = decodeStats(b)
		return err
	}); err != nil {
		return err
	}
	v.r.AppliedIndex, v.r.AppliedHash = v.applied.index, v.applied.hash
	if v.retiredTotals, err = v.get(metaRetired); err != nil {
		return err
	}
	v.retired, v.refs, v.seenRetired = map[uint64]retiredRecord{}, map[uint64]retiredRecord{}, map[uint64]int64{}
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: metaRetiredBlock, UpperBound: prefixEnd(metaRetiredBlock)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		b, valid := retiredKeyBlock(it.Key())
		if !valid {
			v.problem(ProblemRetired, nil, 0, -1, "malformed retired block record key %x", it.Key())
			continue
		}
		rec, err := decodeRetired(it.Value())
		if err != nil {
			v.problem(ProblemRetired, nil, b, -1, "retired block %d: %v", b, err)
			continue
		}
		v.retired[b] = rec
	}
	return it.Error()
}

// keyspaces reports keys outside the four keyspaces.
func (v *verifier) keyspaces() error {
	for _, r := range [][2][]byte{{nil, {prefixChunk}}, {{prefixData + 1}, {prefixExpiry}}, {{prefixExpiry + 1}, {prefixHistory}}, {{prefixHistory + 1}, {prefixBatchID}}, {{prefixBatchTime + 1}, {prefixLog}},
		{{prefixLog + 1}, {metaPrefix}}, {{metaPrefix + 1}, nil}} {
		it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: r[0], UpperBound: r[1]})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			v.problem(ProblemKeyspace, nil, 0, -1, "key %q is in no known keyspace", it.Key())
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}

// data checks every value record, and the chunks of chunked ones.
func (v *verifier) data() error {
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	cit, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixChunk}, UpperBound: []byte{prefixChunk + 1}})
	if err != nil {
		return err
	}
	defer cit.Close()
	lit, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		return err
	}
	defer lit.Close()
	var key []byte
	for ok := it.First(); ok; ok = it.Next() {
		key = append(key[:0], it.Key()[1:]...)
		raw, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		v.r.Keys++
		v.r.KeyBytes += int64(len(key))
		if len(key) == 0 {
			v.problem(ProblemKeyspace, key, 0, -1, "value record with an empty key")
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			v.unreadable++
			v.problem(ProblemValueRecord, key, 0, -1, "%v", err)
			continue
		}
		v.r.ValueBytes += int64(rec.valueLen)
		if rec.kind == recLost {
			v.problem(ProblemValueRecord, key, rec.index, -1, "a lost-value record (history only) in the data keyspace")
		}
		if rec.kind != recRemote {
			v.storedValues++
			v.storedBytes += int64(rec.valueLen)
		}
		if rec.index == 0 || (v.appliedOK && rec.index > v.applied.index) {
			v.problem(ProblemValueIndex, key, rec.index, -1, "value written at index %d, applied index is %d", rec.index, v.applied.index)
		}
		if rec.kind == recChunked {
			v.r.ChunkedValues++
			if err := v.chunks(cit, key, rec); err != nil {
				return err
			}
		}
		if rec.kind == recInLog {
			v.r.InLogValues++
			if v.logOK && rec.block < v.logRec.first {
				r := v.refs[rec.block]
				r.live++
				r.liveBytes += int64(rec.valueLen)
				v.refs[rec.block] = r
			}
			if _, err := v.s.readInLog(lit, rec, nil); err != nil {
				v.problem(ProblemValue, key, rec.index, -1, "value stored in log block %d: %v", rec.block, err)
			}
		}
	}
	return it.Error()
}

// chunkPrefix is the part of chunkKey common to all chunks of key.
func chunkPrefix(key []byte) []byte {
	k := chunkKey(nil, key, 0)
	return k[:len(k)-4]
}

// chunks checks the chunks of one chunked value: each chunk's CRC, none
// missing, none beyond the count, and the reassembled length and CRC.
func (v *verifier) chunks(it *pebble.Iterator, key []byte, rec record) error {
	prefix := chunkPrefix(key)
	var sum uint32
	total, next := 0, 0
	whole := true // every chunk was readable: the whole value can be checked
	missing := func(upto int) {
		if next < upto {
			whole = false
			v.problem(ProblemChunkMissing, key, rec.index, next, "chunks %d..%d of %d missing", next, upto-1, rec.chunks)
		}
	}
	orphans, firstOrphan := 0, -1
	for ok := it.SeekGE(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		k := it.Key()
		if len(k) != len(prefix)+4 {
			v.problem(ProblemKeyspace, key, 0, -1, "malformed chunk key %x", k)
			continue
		}
		n := int(binary.BigEndian.Uint32(k[len(prefix):]))
		if n >= rec.chunks {
			if orphans == 0 {
				firstOrphan = n
			}
			orphans++
			continue
		}
		missing(n)
		raw, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		next = n + 1
		part, err := decodeChunk(raw)
		if err != nil {
			whole = false
			v.problem(ProblemChunk, key, rec.index, n, "%v", err)
			continue
		}
		v.r.Chunks++
		v.r.ChunkBytes += int64(len(part))
		sum = crc32.Update(sum, castagnoli, part)
		total += len(part)
	}
	if err := it.Error(); err != nil {
		return err
	}
	missing(rec.chunks)
	if orphans > 0 {
		v.r.OrphanChunks += int64(orphans)
		v.problem(ProblemChunkOrphan, key, rec.index, firstOrphan, "%d chunks beyond the %d the record counts", orphans, rec.chunks)
	}
	if !whole {
		return nil
	}
	if total != rec.valueLen {
		v.problem(ProblemValue, key, rec.index, -1, "chunks hold %d bytes, record says %d", total, rec.valueLen)
	} else if sum != rec.valueCRC {
		v.problem(ProblemValue, key, rec.index, -1, "reassembled value crc %08x, record says %08x", sum, rec.valueCRC)
	}
	return nil
}

// orphans reports chunks of keys that have no chunked value record. Chunks
// of chunked records were checked by data and are skipped here.
func (v *verifier) orphans() error {
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixChunk}, UpperBound: []byte{prefixChunk + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	var key []byte
	ok := it.First()
	for ok {
		k := it.Key()
		l, n := binary.Uvarint(k[1:])
		if n <= 0 || uint64(len(k)) != 1+uint64(n)+l+4 {
			v.problem(ProblemKeyspace, nil, 0, -1, "malformed chunk key %x", k)
			ok = it.Next()
			continue
		}
		key = append(key[:0], k[1+n:len(k)-4]...)
		prefix := chunkPrefix(key)
		raw, err := v.get(dataKey(nil, key))
		if err != nil {
			return err
		}
		why := ""
		switch rec, derr := decodeRecord(raw); {
		case raw == nil:
			why = "no value record"
		case derr != nil:
			// Reported by data; its chunks cannot be judged.
		case rec.kind != recChunked:
			why = "the value is not chunked"
		}
		if why == "" {
			ok = it.SeekGE(prefixEnd(prefix))
			continue
		}
		first := int(binary.BigEndian.Uint32(k[len(k)-4:]))
		count := 0
		for ; ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
			count++
		}
		v.r.OrphanChunks += int64(count)
		v.problem(ProblemChunkOrphan, key, 0, first, "%d chunks but %s", count, why)
	}
	return it.Error()
}

// stats compares the stats record with the recount.
func (v *verifier) stats() error {
	if !v.statsOK {
		return nil
	}
	st, r := v.statsRec, v.r
	if st.keys != r.Keys {
		v.problem(ProblemStats, nil, 0, -1, "stats record counts %d keys, found %d", st.keys, r.Keys)
	}
	if st.keyBytes != r.KeyBytes {
		v.problem(ProblemStats, nil, 0, -1, "stats record counts %d key bytes, found %d", st.keyBytes, r.KeyBytes)
	}
	if v.unreadable > 0 {
		return nil // the value bytes of unreadable records are unknown
	}
	if st.valueBytes != r.ValueBytes {
		v.problem(ProblemStats, nil, 0, -1, "stats record counts %d value bytes, found %d", st.valueBytes, r.ValueBytes)
	}
	return nil
}

// retiredBlocks checks the retired block records against the blocks found
// before the log start and the in-log records pointing into them.
func (v *verifier) retiredBlocks() error {
	if !v.logOK {
		return nil
	}
	var total retiredTotals
	for b, rec := range v.retired {
		size, found := v.seenRetired[b]
		switch {
		case b >= v.logRec.first:
			v.problem(ProblemRetired, nil, b, -1, "retired block record for block %d, which is in the log (from %d)", b, v.logRec.first)
			continue
		case !found:
			v.problem(ProblemRetired, nil, b, -1, "retired block %d is missing", b)
			continue
		}
		total.blocks++
		total.bytes += size
		refs := v.refs[b]
		if rec.live != refs.live || rec.liveBytes != refs.liveBytes || rec.blockBytes != size {
			v.problem(ProblemRetired, nil, b, -1, "retired block %d: record counts %d live values of %d bytes in %d, found %d of %d bytes in %d",
				b, rec.live, rec.liveBytes, rec.blockBytes, refs.live, refs.liveBytes, size)
		}
	}
	if v.retiredTotals == nil && len(v.retired) == 0 {
		return nil
	}
	t, err := decodeRetiredTotals(v.retiredTotals)
	if err != nil {
		v.problem(ProblemRetired, nil, 0, -1, "retired totals record: %v", err)
		return nil
	}
	if t != total {
		v.problem(ProblemRetired, nil, 0, -1, "retired totals record counts %d blocks of %d bytes, found %d of %d", t.blocks, t.bytes, total.blocks, total.bytes)
	}
	return nil
}

// batchIDs checks every recorded outcome of an idempotent batch: it
// decodes (a write retrying its ID is refused otherwise), and its time
// record, by which it expires, exists.
func (v *verifier) batchIDs() error {
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixBatchID}, UpperBound: []byte{prefixBatchID + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		id := it.Key()[1:]
		raw, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		o, err := decodeBatchOutcome(raw)
		if err != nil {
			v.problem(ProblemBatchID, id, 0, -1, "outcome of batch id %q: %v", id, err)
			continue
		}
		tv, err := v.get(batchTimeKey(o.time, id))
		if err != nil {
			return err
		}
		if tv == nil {
			v.problem(ProblemBatchID, id, o.index, -1, "outcome of batch id %q (time %d) has no time record: it never expires", id, o.time)
		}
	}
	return it.Error()
}
