package store

import (
	"errors"
	"testing"
)

// TestSegmentHeaderFormat: new segments are written at segFormat; a
// header of format 1 still decodes, one of a format this build does not
// know, or without the magic, is refused as corrupt.
func TestSegmentHeaderFormat(t *testing.T) {
	t.Parallel()
	h := segHeader(3, 4096)[frameHeader:]
	format, prev, err := decodeSegHeader(h)
	if err != nil || format != segFormat || prev != (segTail{seq: 3, off: 4096}) {
		t.Fatalf("new header: format %d, prev %+v, %v", format, prev, err)
	}
	old := append([]byte(nil), h...)
	old[len(segMagic)] = '1'
	if format, prev, err := decodeSegHeader(old); err != nil || format != 1 || prev.seq != 3 {
		t.Fatalf("format 1 header: format %d, prev %+v, %v", format, prev, err)
	}
	for name, b := range map[string][]byte{
		"format 0":     append([]byte(segMagic+"0"), h[len(segMagic)+1:]...),
		"format 3":     append([]byte(segMagic+"3"), h[len(segMagic)+1:]...),
		"no format":    []byte(segMagic),
		"no magic":     append([]byte("QSLOG2"), h[len(segMagic)+1:]...),
		"bad position": []byte(segMagic + "2\xff"),
	} {
		if _, _, err := decodeSegHeader(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
