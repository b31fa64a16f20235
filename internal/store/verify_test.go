package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// fillVerifyFixture writes a small database with every kind of record:
// inline values, an empty value, chunked values (one shrunk, one deleted),
// a heartbeat, and enough entries for retention to have truncated the log
// (so the chain starts from a non-zero base hash).
func fillVerifyFixture(t *testing.T, s *Store) {
	t.Helper()
	mustWrite(t, s, set("inline", "hello"), set("empty", ""), setb("big", pattern(1, 3000)))
	mustWrite(t, s, setb("shrunk", pattern(2, 5000)))
	mustWrite(t, s, setb("shrunk", pattern(3, 1500)), setb("gone", pattern(4, 2500)))
	if _, err := s.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, del("gone"), set("k1", "v1"))
	for i := 0; i < 12; i++ {
		mustWrite(t, s, set(fmt.Sprintf("n%02d", i), fmt.Sprint(i)))
	}
}

func verifyFixtureOptions(dir string) Options {
	return Options{Dir: dir, ChunkBytes: 1024, Compression: wal.CompressZstd, Retention: Retention{MaxEntries: 8, MaxBytes: -1, MaxAge: -1}}
}

func TestVerifyCleanDatabaseCounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, verifyFixtureOptions(dir))
	fillVerifyFixture(t, s)
	r := mustVerify(t, s)

	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	lr, err := s.LogRange()
	if err != nil {
		t.Fatal(err)
	}
	if lr.First <= 1 {
		t.Fatalf("fixture did not truncate the log: first %d", lr.First)
	}
	a := appliedHash(t, s)
	want := VerifyReport{
		Keys: st.Keys, KeyBytes: st.KeyBytes, ValueBytes: st.ValueBytes,
		ChunkedValues: 2, Chunks: 3 + 2, ChunkBytes: 3000 + 1500,
		LogFirst: lr.First, LogEntries: int64(lr.Last - lr.First + 1), LogBytes: st.LogBytes,
		AppliedIndex: a.index, AppliedHash: a.hash,
	}
	got := *r
	got.Dir, got.Name, got.DBID, got.Problems, got.LogBlocks = "", "", DBID{}, nil, 0
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("report\n got %+v\nwant %+v", got, want)
	}
	if st.Keys != 17 || r.LogBlocks != int64(len(logBlocks(t, s))) {
		t.Fatalf("keys %d, blocks %d", st.Keys, r.LogBlocks)
	}
	if r.DBID != s.DBID() {
		t.Fatal("report names another database")
	}

	// The same through the read-only entry point, after close.
	s.Close()
	r2, err := Verify(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Clean() || r2.Keys != r.Keys || r2.LogEntries != r.LogEntries || r2.AppliedHash != r.AppliedHash {
		t.Fatalf("read-only verify: %+v\n%s", r2, problemList(r2))
	}
}

func TestVerifyMissingDatabase(t *testing.T) {
	t.Parallel()
	if _, err := Verify(Options{Dir: t.TempDir() + "/nothing"}); err == nil {
		t.Fatal("verify of a missing directory succeeded")
	}
}

// reblock rewrites the log block starting at first after mutating its
// entries, keeping the stored hashes: a block whose bytes changed but
// still decode.
func reblock(t *testing.T, s *Store, first uint64, mutate func(es []wal.Entry)) {
	t.Helper()
	es, err := wal.DecodeBlock(blockGet(t, s, first))
	if err != nil {
		t.Fatal(err)
	}
	mutate(es)
	var b wal.BlockBuilder
	for i := range es {
		b.Add(es[i].AppendBody(nil), es[i].Hash, es[i].Time)
	}
	rawSetBlock(t, s, first, b.Finish(nil, wal.CompressNone))
}

func TestVerifyFindsEachProblem(t *testing.T) {
	t.Parallel()
	type fixture struct {
		s  *Store
		lr LogRange
		a  appliedRecord
	}
	cases := []struct {
		name   string
		break_ func(t *testing.T, f fixture)
		kind   string
		key    string // "" when the problem has no key
		index  uint64 // 0: not checked; see indexOf
		chunk  int
		// indexOf computes the expected index from the fixture.
		indexOf func(f fixture) uint64
	}{
		{name: "value record bit flip", kind: ProblemValueRecord, key: "inline", chunk: -1,
			break_: func(t *testing.T, f fixture) {
				k := dataKey(nil, []byte("inline"))
				raw := rawGet(t, f.s, k)
				rawSet(t, f.s, k, flip(raw, len(raw)-1))
			}},
		{name: "value record index ahead of applied", kind: ProblemValueIndex, key: "k1", chunk: -1,
			indexOf: func(f fixture) uint64 { return f.a.index + 5 },
			break_: func(t *testing.T, f fixture) {
				rawSet(t, f.s, dataKey(nil, []byte("k1")), encodeInline(nil, f.a.index+5, valueAttrs{}, []byte("v1")))
			}},
		{name: "chunk bit flip", kind: ProblemChunk, key: "big", chunk: 1,
			break_: func(t *testing.T, f fixture) {
				k := chunkKey(nil, []byte("big"), 1)
				rawSet(t, f.s, k, flip(rawGet(t, f.s, k), 100))
			}},
		{name: "chunk missing", kind: ProblemChunkMissing, key: "big", chunk: 2,
			break_: func(t *testing.T, f fixture) { rawDelete(t, f.s, chunkKey(nil, []byte("big"), 2)) }},
		{name: "chunk beyond count", kind: ProblemChunkOrphan, key: "big", chunk: 7,
			break_: func(t *testing.T, f fixture) {
				rawSet(t, f.s, chunkKey(nil, []byte("big"), 7), encodeChunk(nil, []byte("stray")))
			}},
		{name: "chunk of an inline value", kind: ProblemChunkOrphan, key: "inline", chunk: 0,
			break_: func(t *testing.T, f fixture) {
				rawSet(t, f.s, chunkKey(nil, []byte("inline"), 0), encodeChunk(nil, []byte("stray")))
			}},
		{name: "chunk of no key", kind: ProblemChunkOrphan, key: "gone", chunk: 2,
			break_: func(t *testing.T, f fixture) {
				rawSet(t, f.s, chunkKey(nil, []byte("gone"), 2), encodeChunk(nil, []byte("stray")))
			}},
		{name: "chunk swapped for a valid one", kind: ProblemValue, key: "big", chunk: -1,
			break_: func(t *testing.T, f fixture) {
				rawSet(t, f.s, chunkKey(nil, []byte("big"), 0), encodeChunk(nil, pattern(99, 1024)))
			}},
		{name: "log block garbage", kind: ProblemLogBlock, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.lr.First },
			break_: func(t *testing.T, f fixture) {
				rawSetBlock(t, f.s, f.lr.First, flip(blockGet(t, f.s, f.lr.First), 0))
			}},
		{name: "log entry changed, block decodes", kind: ProblemLogChain, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.lr.Last },
			break_: func(t *testing.T, f fixture) {
				reblock(t, f.s, f.lr.Last, func(es []wal.Entry) { es[len(es)-1].Ops[0].Value = []byte("forged") })
			}},
		{name: "log block deleted", kind: ProblemLogGap, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.lr.First + 1 },
			break_:  func(t *testing.T, f fixture) { rawDelete(t, f.s, logKey(f.lr.First+1)) }},
		{name: "stale block before the log start", kind: ProblemLogGap, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.lr.First - 1 },
			break_: func(t *testing.T, f fixture) {
				rawSet(t, f.s, logKey(f.lr.First-1), blockGet(t, f.s, f.lr.First))
			}},
		{name: "log byte count", kind: ProblemLogMeta, chunk: -1,
			break_: func(t *testing.T, f fixture) {
				lr, _ := decodeLogRecord(rawGet(t, f.s, metaLog))
				lr.bytes++
				rawSet(t, f.s, metaLog, lr.encode())
			}},
		{name: "base hash", kind: ProblemLogChain, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.lr.First },
			break_: func(t *testing.T, f fixture) {
				lr, _ := decodeLogRecord(rawGet(t, f.s, metaLog))
				lr.baseHash[3] ^= 1
				rawSet(t, f.s, metaLog, lr.encode())
			}},
		{name: "applied hash", kind: ProblemApplied, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.a.index },
			break_: func(t *testing.T, f fixture) {
				a := f.a
				a.hash[0] ^= 1
				rawSet(t, f.s, metaApplied, a.encode())
			}},
		{name: "applied index behind the log", kind: ProblemLogGap, chunk: -1,
			indexOf: func(f fixture) uint64 { return f.a.index },
			break_: func(t *testing.T, f fixture) {
				a := f.a
				a.index--
				rawSet(t, f.s, metaApplied, a.encode())
			}},
		{name: "stats", kind: ProblemStats, chunk: -1,
			break_: func(t *testing.T, f fixture) {
				st, _ := decodeStats(rawGet(t, f.s, metaStats))
				st.valueBytes += 3
				rawSet(t, f.s, metaStats, st.encode())
			}},
		{name: "stray keyspace", kind: ProblemKeyspace, chunk: -1,
			break_: func(t *testing.T, f fixture) { rawSet(t, f.s, []byte("zebra"), []byte("x")) }},
		{name: "stats record undecodable", kind: ProblemMeta, chunk: -1,
			break_: func(t *testing.T, f fixture) { rawSet(t, f.s, metaStats, []byte("short")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t, verifyFixtureOptions(t.TempDir()))
			fillVerifyFixture(t, s)
			mustVerify(t, s)
			f := fixture{s: s, a: appliedHash(t, s)}
			var err error
			if f.lr, err = s.LogRange(); err != nil {
				t.Fatal(err)
			}
			c.break_(t, f)
			r, err := s.Verify()
			if err != nil {
				t.Fatal(err)
			}
			var key []byte
			if c.key != "" {
				key = []byte(c.key)
			}
			p := findProblem(r, c.kind, key)
			if p == nil {
				t.Fatalf("no %s problem for %q; found:\n%s", c.kind, c.key, problemList(r))
			}
			if c.key == "" && p.Key != nil {
				t.Errorf("problem names key %q", p.Key)
			}
			if p.Chunk != c.chunk {
				t.Errorf("problem chunk %d, want %d: %s", p.Chunk, c.chunk, p)
			}
			if c.indexOf != nil {
				if want := c.indexOf(f); p.Index != want {
					t.Errorf("problem index %d, want %d: %s", p.Index, want, p)
				}
			}
			if p.Detail == "" || p.String() == "" {
				t.Error("problem without detail")
			}
			t.Logf("found: %s", p)
		})
	}
}

// TestVerifyBoundsProblemList: a badly damaged database does not make
// Verify hold every problem in memory, but all are counted.
func TestVerifyBoundsProblemList(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{ChunkBytes: 1024})
	var ops []wal.Op
	for i := 0; i < verifyMaxProblems+50; i++ {
		ops = append(ops, set(fmt.Sprintf("k%05d", i), "v"))
	}
	mustWrite(t, s, ops...)
	for _, op := range ops {
		k := dataKey(nil, op.Key)
		rawSet(t, s, k, flip(rawGet(t, s, k), 0))
	}
	r, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if r.ProblemCount != len(ops) || len(r.Problems) != verifyMaxProblems {
		t.Fatalf("%d problems counted, %d kept", r.ProblemCount, len(r.Problems))
	}
	if !bytes.Equal(r.Problems[0].Key, []byte("k00000")) {
		t.Fatalf("first problem %s", r.Problems[0])
	}
}

func TestVerifyRefusesLockedDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	openTest(t, Options{Dir: dir})
	_, err := Verify(Options{Dir: dir})
	if err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify of a database held open: %v", err)
	}
}
