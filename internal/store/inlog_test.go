package store

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestInLogValues covers values stored only in their log block: they read
// back, identical rewrites are still no-ops, overwrites within one group
// keep the last value, compressed blocks fall back to inline records, and
// retention copies still-referenced values out of blocks it drops.
func TestInLogValues(t *testing.T) {
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
	s := openTest(t, Options{Compression: wal.CompressNone})
	mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 5000)})
	raw, closer, err := s.db.Get(dataKey(nil, []byte("k")))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rec, err := decodeRecord(raw)
	if err != nil || !rec.inLog || rec.block != 1 || len(raw) > 64 {
		t.Fatalf("record %+v (%d bytes), err %v: want a small in-log record", rec, len(raw), err)
	}
}
