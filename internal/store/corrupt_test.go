package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// Corruption that Pebble's own checksums did not catch (a bad block or bad
// RAM rewritten with a valid Pebble checksum) is simulated by overwriting a
// stored record through Pebble with a mutated copy.

// getCorrupt asserts that reading key fails with ErrCorrupt and returns no
// value, through Get and through Scan.
func getCorrupt(t *testing.T, s *Store, key string) {
	t.Helper()
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	val, idx, found, err := v.Get([]byte(key))
	if !errors.Is(err, ErrCorrupt) || val != nil || found || idx != 0 {
		t.Fatalf("Get(%s) on corrupt data = %d bytes, index %d, found %v, err %v", key, len(val), idx, found, err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(key)) {
		t.Errorf("error does not name the key: %v", err)
	}
	served := false
	_, err = v.Scan([]byte(key), nil, 0, func(k, val []byte, idx uint64) error {
		served = true
		return nil
	})
	if !errors.Is(err, ErrCorrupt) || served {
		t.Fatalf("Scan over corrupt %s: served %v, err %v", key, served, err)
	}
}

func TestCorruptValuesNeverServedAndRepairedByWrite(t *testing.T) {
	t.Parallel()
	const db = "corrupt-values"
	dir := t.TempDir()
	o := Options{Name: db, Dir: dir, ChunkBytes: 1024, Compression: wal.CompressZstd}
	s := openTest(t, o)
	inline := []byte("a small value")
	mustWrite(t, s, setb("inline", inline), setb("chunked", pattern(1, 4000)), setb("chunkrec", pattern(2, 3000)), set("fine", "ok"))
	s.Close()
	s = openTest(t, o)

	// 1. A flipped bit in an inline value.
	k := dataKey(nil, []byte("inline"))
	raw := rawGet(t, s, k)
	rawSet(t, s, k, flip(raw, len(raw)-2))
	// 2. A flipped bit in chunk 2 of a chunked value.
	ck := chunkKey(nil, []byte("chunked"), 2)
	rawSet(t, s, ck, flip(rawGet(t, s, ck), 500))
	// 3. A flipped bit in the record of a chunked value (its chunk count).
	k = dataKey(nil, []byte("chunkrec"))
	raw = rawGet(t, s, k)
	rawSet(t, s, k, flip(raw, recHeader+2))

	valueCRC := integrityErrors(s, "value_crc")
	chunkCRC := integrityErrors(s, "chunk_crc")
	getCorrupt(t, s, "inline")
	getCorrupt(t, s, "chunkrec")
	if got := integrityErrors(s, "value_crc"); got < valueCRC+2 {
		t.Errorf("value_crc integrity errors %v -> %v", valueCRC, got)
	}
	getCorrupt(t, s, "chunked")
	if got := integrityErrors(s, "chunk_crc"); got < chunkCRC+1 {
		t.Errorf("chunk_crc integrity errors %v -> %v", chunkCRC, got)
	}
	if v, _, ok := get(t, s, "fine"); !ok || v != "ok" {
		t.Fatal("an intact key is unreadable")
	}

	r, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if p := findProblem(r, ProblemValueRecord, []byte("inline")); p == nil {
		t.Errorf("verify missed the inline record:\n%s", problemList(r))
	}
	if p := findProblem(r, ProblemValueRecord, []byte("chunkrec")); p == nil {
		t.Errorf("verify missed the chunked record:\n%s", problemList(r))
	}
	if p := findProblem(r, ProblemChunk, []byte("chunked")); p == nil || p.Chunk != 2 || p.Index != 1 {
		t.Errorf("verify did not pinpoint chunk 2 of chunked at index 1:\n%s", problemList(r))
	}
	if r.ProblemCount != 3 {
		t.Errorf("want exactly 3 problems:\n%s", problemList(r))
	}

	// Writing new values repairs the keys, whatever the old value was:
	// shorter, chunked with fewer chunks, inline.
	res := mustWrite(t, s, set("inline", "new"), setb("chunked", pattern(3, 1500)), set("chunkrec", "now inline"))
	for k, want := range map[string][]byte{"inline": []byte("new"), "chunked": pattern(3, 1500), "chunkrec": []byte("now inline")} {
		if v, idx, ok := get(t, s, k); !ok || v != string(want) || idx != res.Index {
			t.Errorf("after repair %s = %d bytes at %d", k, len(v), idx)
		}
	}
	// The repair left nothing behind: no orphan chunks, exact stats.
	mustVerify(t, s)

	// Deleting a corrupt chunked value leaves nothing behind either.
	mustWrite(t, s, setb("big2", pattern(4, 5000)))
	k = dataKey(nil, []byte("big2"))
	rawSet(t, s, k, flip(rawGet(t, s, k), 0))
	mustWrite(t, s, del("big2"))
	mustVerify(t, s)
}

func TestCorruptLogBlock(t *testing.T) {
	t.Parallel()
	const db = "corrupt-log"
	for _, c := range []wal.Compression{wal.CompressNone, wal.CompressZstd, wal.CompressSnappy} {
		s := openTest(t, Options{Name: db, Compression: c})
		for i := 0; i < 5; i++ {
			mustWrite(t, s, setb("k", bytes.Repeat([]byte{byte('a' + i)}, 600)))
		}
		// Block 3 (one entry per block here) loses its format byte.
		raw := blockGet(t, s, 3)
		rawSetBlock(t, s, 3, flip(raw, 1)) // the compression byte: 0<->1, 2->3
		if raw[1] != byte(c) {
			t.Fatalf("block stored with compression %d, want %d", raw[1], c)
		}
		before := integrityErrors(s, "log_block")
		if _, err := s.ReadLog(2, 100, 1<<20); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("compression %d: ReadLog across a corrupt block: %v", c, err)
		}
		if _, err := s.ReadLog(3, 1, 1<<20); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("compression %d: ReadLog of a corrupt block: %v", c, err)
		}
		if got := integrityErrors(s, "log_block"); got != before+2 {
			t.Errorf("compression %d: log_block integrity errors %v -> %v", c, before, got)
		}
		// Entries after the block are still served.
		if es, err := s.ReadLog(4, 100, 1<<20); err != nil || len(es) != 2 {
			t.Fatalf("compression %d: ReadLog after the corrupt block: %d entries, %v", c, len(es), err)
		}
		r, err := s.Verify()
		if err != nil {
			t.Fatal(err)
		}
		if p := findProblem(r, ProblemLogBlock, nil); p == nil || p.Index != 3 || r.ProblemCount != 1 {
			t.Fatalf("compression %d: verify did not pinpoint block 3 alone:\n%s", c, problemList(r))
		}
		// The data is untouched: the log is history, not the value.
		if v, _, ok := get(t, s, "k"); !ok || v != string(bytes.Repeat([]byte{'e'}, 600)) {
			t.Fatal("value lost")
		}
		// Writes go on; the chain resumes after the damaged block.
		mustWrite(t, s, set("k", "after"))
		if r, _ := s.Verify(); r.ProblemCount != 1 {
			t.Fatalf("compression %d: after a write:\n%s", c, problemList(r))
		}
		s.Close()
	}
}

// TestCorruptLogEntryRejectedByReplica: a log entry changed in a way that
// still decodes is caught by the hash chain: Verify names its index and a
// replica refuses it, so it cannot spread.
func TestCorruptLogEntryRejectedByReplica(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Compression: wal.CompressNone})
	for i := 0; i < 4; i++ {
		mustWrite(t, root, set("k", string(rune('a'+i))))
	}
	reblock(t, root, 3, func(es []wal.Entry) { es[0].Ops[0].Value = []byte("X") })
	r, err := root.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if p := findProblem(r, ProblemLogChain, nil); p == nil || p.Index != 3 || r.ProblemCount != 1 {
		t.Fatalf("verify did not pinpoint entry 3:\n%s", problemList(r))
	}
	entries, err := root.ReadLog(1, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	replica := openTest(t, Options{DBID: root.DBID()})
	err = replica.Apply(context.Background(), entries)
	if !errors.Is(err, ErrNotContiguous) || replica.AppliedIndex() != 0 {
		t.Fatalf("replica applied a forged log: %v, applied %d", err, replica.AppliedIndex())
	}
	if err := replica.Apply(context.Background(), entries[:2]); err != nil {
		t.Fatal(err)
	}
	if err := replica.Apply(context.Background(), entries[2:]); !errors.Is(err, ErrNotContiguous) || replica.AppliedIndex() != 2 {
		t.Fatalf("replica applied forged entry 3: %v, applied %d", err, replica.AppliedIndex())
	}
}

// TestReadLogRefusesMissingBlock: a log block lost from the middle of the
// retained log (a damaged store) makes ReadLog fail with ErrCorrupt, counted,
// instead of returning the entries around the hole as if they were
// consecutive: the watch hub would hand them to watchers, which would miss
// the lost changes without a word, and sources would serve the gap. An
// overlapping block (an entry twice) is refused alike.
func TestReadLogRefusesMissingBlock(t *testing.T) {
	t.Parallel()
	const db = "readlog-hole"
	s := openTest(t, Options{Name: db})
	for i := 0; i < 6; i++ {
		mustWrite(t, s, set("k", string(rune('a'+i))))
	}
	if got := logBlocks(t, s); len(got) != 6 {
		t.Fatalf("setup: blocks %v, want one per entry", got)
	}
	blk3 := blockGet(t, s, 3)
	rawSetBlock(t, s, 3, blk3) // stored in Pebble, where it can be deleted
	rawDelete(t, s, logKey(3))
	before := integrityErrors(s, "log_block")
	for _, from := range []uint64{1, 2} {
		es, err := s.ReadLog(from, 100, 1<<20)
		if !errors.Is(err, ErrCorrupt) {
			var idx []uint64
			for _, e := range es {
				idx = append(idx, e.Index)
			}
			t.Fatalf("ReadLog(%d) across a lost block: entries %v, err %v", from, idx, err)
		}
	}
	if got := integrityErrors(s, "log_block"); got != before+2 {
		t.Errorf("log_block integrity errors %v -> %v", before, got)
	}
	// What precedes the hole, and what follows it, is still served.
	if es, err := s.ReadLog(1, 2, 1<<20); err != nil || len(es) != 2 {
		t.Fatalf("ReadLog before the hole: %d entries, %v", len(es), err)
	}
	if es, err := s.ReadLog(4, 100, 1<<20); err != nil || len(es) != 3 || es[0].Index != 4 {
		t.Fatalf("ReadLog after the hole: %d entries, %v", len(es), err)
	}

	// Block 3 back, and block 2 rewritten to hold entries 2 and 3: entry
	// 3 would come twice.
	rawSet(t, s, logKey(3), blk3)
	es, err := s.ReadLog(2, 2, 1<<20)
	if err != nil || len(es) != 2 {
		t.Fatalf("ReadLog of the repaired log: %d entries, %v", len(es), err)
	}
	var b wal.BlockBuilder
	for i := range es {
		b.AddEntry(&es[i], wal.Hash{}, false)
	}
	rawSetBlock(t, s, 2, b.Finish(nil, wal.CompressNone))
	if es, err := s.ReadLog(1, 100, 1<<20); !errors.Is(err, ErrCorrupt) {
		var idx []uint64
		for _, e := range es {
			idx = append(idx, e.Index)
		}
		t.Fatalf("ReadLog across overlapping blocks: entries %v, err %v", idx, err)
	}
}
