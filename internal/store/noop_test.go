package store

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// writeInOneGroup submits the batches in order, each a little after the
// one before, to a store with a long BatchWindow, so that they share one
// commit group, and returns their results; it fails the test on an error.
func writeInOneGroup(t *testing.T, s *Store, batches ...Batch) []WriteResult {
	t.Helper()
	res, errs := tryInOneGroup(s, batches...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	return res
}

// tryInOneGroup is writeInOneGroup returning the errors.
func tryInOneGroup(s *Store, batches ...Batch) ([]WriteResult, []error) {
	res := make([]WriteResult, len(batches))
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = s.Write(context.Background(), b)
		}()
		time.Sleep(20 * time.Millisecond) // queued in this order
	}
	wg.Wait()
	return res, errs
}

// sameCRC returns a value of x's length, different from x, with x's
// CRC-32C: x with its first byte changed and four bytes at 100 chosen so
// the CRC comes out the same (CRC is affine in the bits of a message of
// fixed length, and any 32 consecutive bits change it independently).
func sameCRC(x []byte) []byte {
	y := bytes.Clone(x)
	y[0] ^= 0xff
	target := crc(x) ^ crc(y)
	// basis[b]: a combination (mask over the 32 window bits) whose CRC
	// change has b as its highest bit, and that change.
	var basis [32]struct{ mask, delta uint32 }
	var have [32]bool
	for i := range 32 {
		z := bytes.Clone(y)
		z[100+i/8] ^= 1 << (i % 8)
		d, m := crc(z)^crc(y), uint32(1)<<i
		for b := 31; b >= 0 && d != 0; b-- {
			if d&(1<<b) == 0 {
				continue
			}
			if !have[b] {
				basis[b], have[b] = struct{ mask, delta uint32 }{m, d}, true
				d = 0
				break
			}
			d, m = d^basis[b].delta, m^basis[b].mask
		}
	}
	var mask uint32
	for b := 31; b >= 0; b-- {
		if target&(1<<b) != 0 && have[b] {
			target ^= basis[b].delta
			mask ^= basis[b].mask
		}
	}
	for i := range 32 {
		if mask&(1<<i) != 0 {
			y[100+i/8] ^= 1 << (i % 8)
		}
	}
	return y
}

// An identical rewrite of a chunked value set earlier in the same commit
// group is judged against that value, not against the stored one: the
// committer used to read the stored chunks (the value before the group),
// so the rewrite was logged as a change, and a value with the stored
// one's length and CRC but other bytes, set in between, was kept while a
// write back to the stored value was answered as a no-op.
func TestNoopOfChunkedValueSetInTheGroup(t *testing.T) {
	t.Parallel()
	big := pattern(1, 3000) // three chunks of 1 KiB
	t.Run("rewrite", func(t *testing.T) {
		s := openTest(t, Options{ChunkBytes: 1024, BatchWindow: 300 * time.Millisecond})
		before := s.AppliedIndex()
		b := Batch{Ops: []wal.Op{setb("k", big)}}
		res := writeInOneGroup(t, s, b, b)
		if !res[0].Changed || res[1].Changed || s.AppliedIndex() != before+1 {
			t.Fatalf("set then identical rewrite in one group: %+v, index %d → %d, want one entry", res, before, s.AppliedIndex())
		}
		mustVerify(t, s)
	})
	t.Run("same-crc", func(t *testing.T) {
		s := openTest(t, Options{ChunkBytes: 1024, BatchWindow: 300 * time.Millisecond})
		other := sameCRC(big)
		if bytes.Equal(other, big) || crc(other) != crc(big) || len(other) != len(big) {
			t.Fatal("no value of the same length and CRC made")
		}
		mustWrite(t, s, setb("k", big))
		res := writeInOneGroup(t, s, Batch{Ops: []wal.Op{setb("k", other)}}, Batch{Ops: []wal.Op{setb("k", big)}})
		v, idx, _ := get(t, s, "k")
		if !bytes.Equal([]byte(v), big) || !res[1].Changed || idx != res[1].Index {
			t.Fatalf("k set to another value, then back, in one group: %+v; k holds the first value: %v (index %d)", res, bytes.Equal([]byte(v), other), idx)
		}
		mustVerify(t, s)
	})
}
