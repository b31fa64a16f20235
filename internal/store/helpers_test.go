package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Helpers shared by the store tests other than store_test.go.

func setb(k string, v []byte) wal.Op { return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: v} }

// pattern returns n bytes that differ with seed, so chunks of one value and
// values of different keys are all distinct.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// digest hashes every key, value and index of the data keyspace, through
// the public read path.
func digest(t *testing.T, s *Store) ([32]byte, int) {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.Hash, d.Keys
}

// appliedHash reads the durable applied record.
func appliedHash(t *testing.T, s *Store) appliedRecord {
	t.Helper()
	a, err := s.readApplied()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mustVerify runs Verify on the open store and fails on any problem.
func mustVerify(t *testing.T, s *Store) *VerifyReport {
	t.Helper()
	r, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		t.Fatalf("verify found %d problems:\n%s", r.ProblemCount, problemList(r))
	}
	return r
}

func problemList(r *VerifyReport) string {
	var b strings.Builder
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	return b.String()
}

// rawGet reads a key of any keyspace straight from Pebble.
func rawGet(t *testing.T, s *Store, k []byte) []byte {
	t.Helper()
	v, c, err := s.db.Get(k)
	if err != nil {
		t.Fatalf("raw get %q: %v", k, err)
	}
	defer c.Close()
	return append([]byte(nil), v...)
}

// blockGet returns log block b as stored: in Pebble, or in its segment.
func blockGet(t *testing.T, s *Store, b uint64) []byte {
	t.Helper()
	blk, err := s.blockBytes(rawGet(t, s, logKey(b)), nil)
	if err != nil {
		t.Fatalf("log block %d: %v", b, err)
	}
	return blk
}

// segmentRef returns where log block b is in the segments; it fails the
// test if the block is stored in Pebble.
func segmentRef(t *testing.T, s *Store, b uint64) blockRef {
	t.Helper()
	ref, ok, err := decodeBlockRef(rawGet(t, s, logKey(b)))
	if err != nil || !ok {
		t.Fatalf("log block %d is not in a segment (err %v)", b, err)
	}
	return ref
}

// flipSegmentByte flips bit 0x40 of the byte at offset at of log block b
// in its segment file, behind the store's back (a bad disk block).
func flipSegmentByte(t *testing.T, s *Store, b uint64, at int) {
	t.Helper()
	ref := segmentRef(t, s, b)
	f, err := s.opts.FS.OpenReadWrite(s.opts.FS.PathJoin(s.opts.Dir, segName(ref.seq)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var one [1]byte
	if _, err := f.ReadAt(one[:], ref.off+int64(at)); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x40
	if _, err := f.WriteAt(one[:], ref.off+int64(at)); err != nil {
		t.Fatal(err)
	}
}

// rawSetBlock replaces log block b with blk, stored in Pebble, behind the
// store's back, keeping the use record of the segment it was in right:
// the damage is to the block alone.
func rawSetBlock(t *testing.T, s *Store, b uint64, blk []byte) {
	t.Helper()
	if ref, ok, err := decodeBlockRef(rawGet(t, s, logKey(b))); err == nil && ok {
		u, err := decodeSegUse(rawGet(t, s, segUseKey(ref.seq)))
		if err != nil {
			t.Fatal(err)
		}
		u.blocks--
		u.bytes -= int64(ref.n)
		if u.blocks == 0 {
			rawDelete(t, s, segUseKey(ref.seq))
		} else {
			rawSet(t, s, segUseKey(ref.seq), u.encode())
		}
	}
	rawSet(t, s, logKey(b), blk)
}

// rawSet overwrites a key behind the store's back: a stored record changed
// without Pebble noticing (a bad disk block or RAM rewritten).
func rawSet(t *testing.T, s *Store, k, v []byte) {
	t.Helper()
	if err := s.db.Set(k, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func rawDelete(t *testing.T, s *Store, k []byte) {
	t.Helper()
	if err := s.db.Delete(k, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// flip returns a copy of b with bit 0 of b[i] inverted.
func flip(b []byte, i int) []byte {
	out := append([]byte(nil), b...)
	out[i] ^= 1
	return out
}

// logBlocks lists the first index of every stored log block.
func logBlocks(t *testing.T, s *Store) []uint64 {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []uint64
	for ok := it.First(); ok; ok = it.Next() {
		i, _ := logKeyIndex(it.Key())
		out = append(out, i)
	}
	return out
}

// findProblem returns the first problem of kind about key (nil: any key).
func findProblem(r *VerifyReport, kind string, key []byte) *Problem {
	for i := range r.Problems {
		p := &r.Problems[i]
		if p.Kind == kind && (key == nil || bytes.Equal(p.Key, key)) {
			return p
		}
	}
	return nil
}

func writeBatch(ctx context.Context, s *Store, ops ...wal.Op) (WriteResult, error) {
	return s.Write(ctx, Batch{Ops: ops})
}

// integrityErrors reads s's integrity errors of kind.
func integrityErrors(s *Store, kind string) float64 { return s.Metrics().IntegrityErrors[kind] }

// quietLogger drops store and Pebble messages (tests that expect errors
// would otherwise flood the output).
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// reportCPU adds a cpu-ns/op metric to a benchmark: the CPU time the whole
// process used per iteration (GC included), which, unlike ns/op, does not
// count the time the benchmark waited for a core on a busy machine; and
// its two parts, user-ns/op (the program's own work, the steadier figure
// on a shared machine) and sys-ns/op (the kernel's: writes, fsyncs, file
// creation, scheduling). Call it after setup; it reports when the
// benchmark ends.
func reportCPU(b *testing.B) {
	user0, sys0 := processCPUSplit()
	b.Cleanup(func() {
		user, sys := processCPUSplit()
		if user0+sys0 > 0 && b.N > 0 {
			n := float64(b.N)
			b.ReportMetric(float64(user+sys-user0-sys0)/n, "cpu-ns/op")
			b.ReportMetric(float64(user-user0)/n, "user-ns/op")
			b.ReportMetric(float64(sys-sys0)/n, "sys-ns/op")
		}
	})
}

// tailNow is the position after the last appended frame.
func (g *segments) tailNow() segTail {
	g.mu.Lock()
	defer g.mu.Unlock()
	return segTail{seq: g.curSeq, off: g.tail}
}
