package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// rawUsage adds up, straight from Pebble, every data and chunk key that
// belongs to a key with prefix: key length + 8 + value length, plus the
// value length of in-log records. It shares no code with PrefixUsage but
// decodeRecord (to tell in-log records and value lengths apart).
func rawUsage(t *testing.T, s *Store, prefix string) (u Usage, inLog, chunked int) {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		switch k[0] {
		case prefixData:
			if !bytes.HasPrefix(k[1:], []byte(prefix)) {
				continue
			}
			rec, err := decodeRecord(v)
			if err != nil {
				t.Fatal(err)
			}
			u.Keys++
			u.KeyBytes += int64(len(k) - 1)
			u.ValueBytes += int64(rec.valueLen)
			u.StoredBytes += int64(len(k)) + 8 + int64(len(v))
			if rec.kind == recInLog {
				inLog++
				u.StoredBytes += int64(rec.valueLen)
			}
			if rec.kind == recChunked {
				chunked++
			}
		case prefixChunk:
			n, sz := binary.Uvarint(k[1:])
			key := k[1+sz : 1+sz+int(n)]
			if bytes.HasPrefix(key, []byte(prefix)) {
				u.StoredBytes += int64(len(k)) + 8 + int64(len(v))
			}
		}
	}
	return u, inLog, chunked
}

func prefixUsage(t *testing.T, s *Store, prefix string) Usage {
	t.Helper()
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	u, err := v.PrefixUsage([]byte(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestPrefixUsage checks PrefixUsage against the raw Pebble keys for inline,
// in-log and chunked values, after overwrites and deletes, and against the
// documented formula for one key of each kind.
func TestPrefixUsage(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "usage", ChunkBytes: 4096})
	// Each write is its own commit, hence its own log block: an in-log
	// value's offset in its block is below 128 (one uvarint byte).
	mustWrite(t, s, setb("a/inline", []byte("0123456789")))
	mustWrite(t, s, setb("a/inlog", pattern(1, 2000)))
	mustWrite(t, s, setb("a/chunked", pattern(2, 10000)))
	mustWrite(t, s, setb("a/shrunk", pattern(3, 9000)))
	mustWrite(t, s, setb("a/shrunk", []byte("x")), setb("a/gone", []byte("y")))
	mustWrite(t, s, del("a/gone"))
	mustWrite(t, s, setb("ab", []byte("not under a/")), setb("b/1", pattern(4, 5000)))

	for _, p := range []string{"", "a/", "a/i", "a/inlog", "b/", "zzz"} {
		want, _, _ := rawUsage(t, s, p)
		if got := prefixUsage(t, s, p); got != want {
			t.Errorf("PrefixUsage(%q) = %+v, raw Pebble keys say %+v", p, got, want)
		}
	}
	if _, inLog, chunked := rawUsage(t, s, ""); inLog != 1 || chunked != 2 {
		t.Fatalf("dataset has %d in-log and %d chunked records, want 1 and 2", inLog, chunked)
	}

	// docs/storage.md: inline 22 bytes per key; in-log 22 + 8 + uvarint(offset)
	// + uvarint(length) + 4; chunked 22 + uvarint(length) + uvarint(chunks) + 4
	// + chunks × (1 + uvarint(len key) + len key + 4 + 8 + 4).
	for _, c := range []struct {
		key      string
		overhead int64
	}{
		{"a/inline", 22},
		{"a/inlog", 22 + 8 + 1 + 2 + 4},
		{"a/chunked", 22 + 2 + 1 + 4 + 3*(1+1+9+4+8+4)},
		{"a/shrunk", 22},
	} {
		if got := prefixUsage(t, s, c.key).Overhead(); got != c.overhead {
			t.Errorf("overhead of %s = %d, formula says %d", c.key, got, c.overhead)
		}
	}

	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	tot, err := v.Totals()
	if err != nil {
		t.Fatal(err)
	}
	all, _, _ := rawUsage(t, s, "")
	if tot.Keys != all.Keys || tot.KeyBytes != all.KeyBytes || tot.ValueBytes != all.ValueBytes {
		t.Errorf("Totals = %+v, keys say %+v", tot, all)
	}
}

// BenchmarkPrefixUsage1M measures PrefixUsage on 1M keys (10 prefixes of
// 100k keys, 20-byte keys, 100-byte values) over the whole keyspace and
// over one prefix. Loading the keys takes a while: run it alone, with
// -benchtime=3x.
func BenchmarkPrefixUsage1M(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), MinFreeBytes: 1, BallastBytes: -1, Compression: wal.CompressZstd, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("v"), 100)
	const keys, perBatch = 1_000_000, 10_000
	for i := 0; i < keys; i += perBatch {
		ops := make([]wal.Op, perBatch)
		for j := range ops {
			n := i + j
			ops[j] = wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "p%d/key-%011d", n%10, n), Value: val}
		}
		if _, err := s.Write(context.Background(), Batch{Ops: ops}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, prefix string
		keys         int64
	}{{"all", "", keys}, {"one-prefix", "p3/", keys / 10}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				v, err := s.View()
				if err != nil {
					b.Fatal(err)
				}
				u, err := v.PrefixUsage([]byte(c.prefix))
				v.Close()
				if err != nil || u.Keys != c.keys {
					b.Fatalf("%+v %v", u, err)
				}
			}
		})
	}
}
