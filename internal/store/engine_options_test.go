package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// blobFileBytes is the size of the Pebble blob files of the store in dir.
func blobFileBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".blob") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// The adaptive blob compression (blockCompression) skips compressing
// blocks that do not shrink, but compressible values must still be
// compressed on disk; incompressible ones are stored at their size. Log
// blocks of 40 kB values are stored raw (values dominate them), so the
// blob files hold them as they are and only Pebble can compress them.
func TestBlobFilesCompressOnlyWhatShrinks(t *testing.T) {
	const n, size = 200, 40 << 10
	compressible := func(i int) []byte {
		var b strings.Builder
		for b.Len() < size {
			fmt.Fprintf(&b, `{"service":"api-%d","replicas":%d,"region":"eu-west-%d"},`, i, b.Len()%7, i%3)
		}
		return []byte(b.String()[:size])
	}
	random := func(int) []byte {
		v := make([]byte, size)
		rand.Read(v)
		return v
	}
	for _, tc := range []struct {
		name     string
		value    func(int) []byte
		min, max float64 // blob bytes / value bytes
	}{
		{"compressible", compressible, 0, 0.5},
		{"random", random, 0.98, 1.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, Options{Dir: dir, Compression: wal.CompressZstd, Logger: quietLogger()})
			values := make([][]byte, n)
			for i := range n {
				values[i] = tc.value(i)
				op := wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "k%d", i), Value: values[i]}
				if _, err := s.Write(context.Background(), Batch{Ops: []wal.Op{op}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
			ratio := float64(blobFileBytes(t, dir)) / float64(n*size)
			if ratio < tc.min || ratio > tc.max {
				t.Fatalf("blob files hold %.2f of the value bytes, want %.2f to %.2f", ratio, tc.min, tc.max)
			}
			v, err := s.View()
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			for i := range n {
				got, _, ok, err := v.Get(fmt.Appendf(nil, "k%d", i))
				if err != nil || !ok || !bytes.Equal(got, values[i]) {
					t.Fatalf("read back k%d: ok %v err %v, equal %v", i, ok, err, bytes.Equal(got, values[i]))
				}
			}
		})
	}
}

// Flushes and compactions of large values write few tables (L0 target
// file size 32 MiB, doubling per level). A table's size counts the blob
// bytes it references, so at Pebble's default (2 MB for L0, 4 MB for
// Lbase) compactions cut the references to 160 MB of values into ~80
// tables of a few kB each, every one created, written and fsynced.
func TestLargeValuesMakeFewTables(t *testing.T) {
	const n, size = 4000, 40 << 10 // 160 MB: 10 flushes, and compactions
	s := openTest(t, Options{Dir: t.TempDir(), Logger: quietLogger()})
	v := make([]byte, size)
	for i := range n {
		rand.Read(v[:64])
		op := wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "k%d", i), Value: v}
		if _, err := s.Write(context.Background(), Batch{Ops: []wal.Op{op}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	m := s.db.Metrics()
	flushes, tables := m.Flush.Count, m.Levels[0].TablesFlushed
	var compacted, blobs uint64
	for _, l := range m.Levels {
		compacted += l.TablesCompacted
	}
	blobs = m.BlobFiles.LiveCount
	t.Logf("%d flushes wrote %d tables; compactions %d tables; blob files %d", flushes, tables, compacted, blobs)
	if flushes < 8 || tables > uint64(flushes)+1 {
		t.Fatalf("%d flushes wrote %d tables, want about one each", flushes, tables)
	}
	if compacted > 2*uint64(flushes) {
		t.Fatalf("compactions wrote %d tables after %d flushes, want at most %d", compacted, flushes, 2*flushes)
	}
}
