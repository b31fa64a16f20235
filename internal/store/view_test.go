package store

import (
	"bytes"
	"testing"
)

// TestViewReadsChunksAtItsIndex: a View is a consistent read at one applied
// index, chunked values included. A chunked value overwritten or deleted
// after the View opened must still read as it was, and must not be
// mistaken for corruption.
func TestViewReadsChunksAtItsIndex(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "view-chunks", ChunkBytes: 1024})
	v1 := pattern(1, 5000) // 5 chunks
	mustWrite(t, s, setb("big", v1), setb("doomed", v1))
	before := integrityErrors(s, "chunk_crc")

	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	mustWrite(t, s, setb("big", pattern(2, 2100)), del("doomed")) // 3 chunks; 0 chunks
	for _, k := range []string{"big", "doomed"} {
		got, idx, ok, err := v.Get([]byte(k))
		if err != nil || !ok || idx != 1 || !bytes.Equal(got, v1) {
			t.Errorf("view at index %d: Get(%s) = %d bytes, index %d, %v, %v", v.Index(), k, len(got), idx, ok, err)
		}
	}
	n := 0
	if _, err := v.Scan(nil, nil, 0, func(k, val []byte, idx uint64) error {
		if !bytes.Equal(val, v1) {
			t.Errorf("view scan: %s has %d bytes", k, len(val))
		}
		n++
		return nil
	}); err != nil || n != 2 {
		t.Errorf("view scan: %d keys, %v", n, err)
	}
	if after := integrityErrors(s, "chunk_crc"); after != before {
		t.Errorf("integrity errors counted for a consistent read: %v -> %v", before, after)
	}
}
