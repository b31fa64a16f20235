package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestInLogValues covers values stored only in their log block: they read
// back, identical rewrites are still no-ops, overwrites within one group
// keep the last value, compressed blocks fall back to inline records, and
// retention copies still-referenced values out of blocks it drops.
func TestInLogValues(t *testing.T) {
	t.Parallel()
	big := func(tag string, n int) []byte { return bytes.Repeat([]byte(tag), n) }
	for _, comp := range []wal.Compression{wal.CompressNone, wal.CompressZstd} {
		t.Run(fmt.Sprint(comp), func(t *testing.T) {
			s := openTest(t, Options{Compression: comp, Retention: Retention{MaxEntries: 5}})
			ctx := context.Background()
			// Random-ish bytes do not compress: in-log even with zstd.
			rnd := make([]byte, 4096)
			for i := range rnd {
				rnd[i] = byte(i*7919 + i*i)
			}
			mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("r"), Value: rnd})
			mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("a"), Value: big("a", 3000)})
			if v, _, _ := get(t, s, "a"); v != string(big("a", 3000)) {
				t.Fatal("in-log value does not read back")
			}
			if r := mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("a"), Value: big("a", 3000)}); r.Changed {
				t.Fatal("identical rewrite of an in-log value produced an entry")
			}
			// Two writes of one key in one batch: the last one wins.
			mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("b"), Value: big("1", 2000)},
				wal.Op{Type: wal.OpSet, Key: []byte("b"), Value: []byte("small")})
			if v, _, _ := get(t, s, "b"); v != "small" {
				t.Fatalf("b = %.10q, want the batch's last value", v)
			}
			mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("c"), Value: big("c", 2000)}, del("c"))
			if _, _, ok := get(t, s, "c"); ok {
				t.Fatal("set then delete in one batch left the key")
			}
			// Push the log past retention: blocks holding a, r are dropped.
			for i := 0; i < 20; i++ {
				if _, err := s.Write(ctx, Batch{Ops: []wal.Op{set(fmt.Sprintf("filler%d", i), "x")}}); err != nil {
					t.Fatal(err)
				}
			}
			lr, err := s.LogRange()
			if err != nil || lr.First < 5 {
				t.Fatalf("log not truncated: %+v %v", lr, err)
			}
			if v, _, _ := get(t, s, "a"); v != string(big("a", 3000)) {
				t.Fatal("value lost when its log block was dropped")
			}
			if v, _, _ := get(t, s, "r"); v != string(rnd) {
				t.Fatal("random value lost when its log block was dropped")
			}
			rep, err := s.Verify()
			if err != nil || rep.ProblemCount != 0 {
				t.Fatalf("verify: %v %+v", err, rep.Problems)
			}
		})
	}
}

// TestInLogRecordWritten checks that uncompressed blocks really carry the
// value once: the value record points into the log.
func TestInLogRecordWritten(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Compression: wal.CompressNone})
	mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 5000)})
	raw, closer, err := s.db.Get(dataKey(nil, []byte("k")))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rec, err := decodeRecord(raw)
	if err != nil || rec.kind != recInLog || rec.block != 1 || len(raw) > 64 {
		t.Fatalf("record %+v (%d bytes), err %v: want a small in-log record", rec, len(raw), err)
	}
}

// TestInLogValueBlockDamaged: when the log block holding an in-log value is
// damaged or gone, the read fails with ErrCorrupt (never a wrong value),
// the integrity metric counts it, Verify names the key, and writing the key
// again repairs it.
func TestInLogValueBlockDamaged(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"flip", "delete"} {
		t.Run(damage, func(t *testing.T) {
			s := openTest(t, Options{Name: "inlog-" + damage, Compression: wal.CompressNone})
			val := bytes.Repeat([]byte("z"), 3000)
			r := mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("k"), Value: val})
			k := logKey(r.Index)
			var err error
			if damage == "flip" {
				// inside the value, in the payload, in the segment file
				flipSegmentByte(t, s, r.Index, segmentRef(t, s, r.Index).n-100)
			} else {
				err = s.db.Delete(k, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := s.Metrics().IntegrityErrors["log_value_crc"]
			v, verr := s.View()
			if verr != nil {
				t.Fatal(verr)
			}
			got, _, _, gerr := v.Get([]byte("k"))
			v.Close()
			if !errors.Is(gerr, ErrCorrupt) || got != nil {
				t.Fatalf("read of a damaged in-log value: %q, %v", got, gerr)
			}
			if s.Metrics().IntegrityErrors["log_value_crc"] != before+1 {
				t.Fatal("integrity metric not incremented")
			}
			rep, err := s.Verify()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range rep.Problems {
				if p.Kind == ProblemValue && string(p.Key) == "k" {
					found = true
				}
			}
			if !found {
				t.Fatalf("verify did not name the key: %+v", rep.Problems)
			}
			mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("k"), Value: []byte("repaired")})
			if v, _, _ := get(t, s, "k"); v != "repaired" {
				t.Fatal("rewrite did not repair the key")
			}
		})
	}
}

// TestBlockCompressionChoice: with zstd configured, a block made mostly of
// large values is stored raw, so that they are written once (in-log
// records), even when they compress; a block of mostly small data is
// compressed, and its large values then get inline records.
func TestBlockCompressionChoice(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Compression: wal.CompressZstd})
	block := func(index uint64) wal.Compression {
		_, c, _, err := wal.ParseBlockHeader(blockGet(t, s, index))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	record := func(key string) record {
		raw, closer, err := s.db.Get(dataKey(nil, []byte(key)))
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		rec, err := decodeRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	large := bytes.Repeat([]byte("compressible "), 400) // 5,200 bytes
	r := mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("large"), Value: large})
	if c := block(r.Index); c != wal.CompressNone || record("large").kind != recInLog {
		t.Errorf("block of one large value: compression %d, in-log %v; want raw and in-log", c, record("large").kind == recInLog)
	}
	ops := []wal.Op{{Type: wal.OpSet, Key: []byte("mixed"), Value: large[:1100]}}
	for i := range 200 {
		ops = append(ops, set(fmt.Sprintf("small-%03d", i), "a small value that compresses well"))
	}
	r = mustWrite(t, s, ops...)
	if c := block(r.Index); c != wal.CompressZstd || record("mixed").kind == recInLog {
		t.Errorf("block of mostly small values: compression %d, in-log %v; want zstd and inline", c, record("mixed").kind == recInLog)
	}
	for k, want := range map[string]string{"large": string(large), "mixed": string(large[:1100]), "small-007": "a small value that compresses well"} {
		if v, _, _ := get(t, s, k); v != want {
			t.Errorf("%s = %.20q…, want %.20q…", k, v, want)
		}
	}
	if rep, err := s.Verify(); err != nil || rep.ProblemCount != 0 {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
}
