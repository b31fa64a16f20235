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

// The adaptive blob compression (engineCompression) skips compressing
// blocks that do not shrink, but compressible values must still be
// compressed on disk; incompressible ones are stored at their size. Log
// blocks of 40 kB values are stored raw (values dominate them), so the
// blob files hold them as they are and only Pebble can compress them.
// Blocks are kept in Pebble here, as Raft and proxy stores keep them; log
// segments hold them otherwise.
func TestBlobFilesCompressOnlyWhatShrinks(t *testing.T) {
	t.Parallel()
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
			s := openTest(t, Options{Dir: dir, Compression: wal.CompressZstd, Logger: quietLogger(), blocksInPebble: true})
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
