package wal

import (
	"bytes"
	"testing"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/ and run as unit tests
// with plain `go test`. Run a fuzzer with
//
//	go test -fuzz=FuzzDecodeBody -fuzztime=45s ./internal/wal/

// FuzzDecodeBody: DecodeBody never panics, and a body it accepts is
// canonical: it re-encodes to exactly the same bytes (the hash chain is
// computed over the re-encoding) with a matching BodySize, and it survives
// a trip through a block.
func FuzzDecodeBody(f *testing.F) {
	for _, e := range sampleEntries() {
		f.Add(e.AppendBody(nil))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := DecodeBody(body)
		if err != nil {
			return
		}
		again := e.AppendBody(nil)
		if !bytes.Equal(again, body) {
			t.Fatalf("re-encoding differs:\nin  %x\nout %x", body, again)
		}
		if e.BodySize() != len(body) {
			t.Fatalf("BodySize %d for %d bytes", e.BodySize(), len(body))
		}
		e.Seal(Hash{}, nil)
		var b BlockBuilder
		b.Add(body, e.Hash, e.Time)
		got, err := DecodeBlock(b.Finish(nil, CompressSnappy))
		if err != nil {
			t.Fatalf("block of a valid body: %v", err)
		}
		if len(got) != 1 || !sameEntry(got[0], e) {
			t.Fatalf("block round trip: %+v", got)
		}
		var v Verifier
		v.Index = e.Index - 1
		if e.Index != 0 {
			if err := v.Check(&got[0]); err != nil {
				t.Fatalf("sealed entry does not verify: %v", err)
			}
		}
	})
}

// FuzzDecodeBlock: DecodeBlock never panics nor allocates without bound;
// the entries of a block it accepts are well formed, survive a rebuild
// with every compression, and BlockLastHash agrees with the last one.
func FuzzDecodeBlock(f *testing.F) {
	for _, c := range []Compression{CompressNone, CompressZstd, CompressSnappy} {
		f.Add(build(chain(1, 3, 100, Hash{}), c))
		f.Add(build(chain(42, 1, 0, Hash{}), c))
	}
	hb := Entry{Index: 5, Time: 77, Kind: KindHeartbeat}
	hb.Seal(Hash{1}, nil)
	f.Add(build([]Entry{hb}, CompressNone))
	f.Fuzz(func(t *testing.T, blk []byte) {
		entries, err := DecodeBlock(blk)
		if err != nil {
			return
		}
		if len(entries) == 0 {
			t.Fatal("accepted a block without entries")
		}
		h, err := BlockLastHash(blk)
		if err != nil || h != entries[len(entries)-1].Hash {
			t.Fatalf("BlockLastHash %s %v, last entry %s", h, err, entries[len(entries)-1].Hash)
		}
		for _, c := range []Compression{CompressNone, CompressZstd, CompressSnappy} {
			again, err := DecodeBlock(build(entries, c))
			if err != nil {
				t.Fatalf("rebuilt block (compression %d): %v", c, err)
			}
			if len(again) != len(entries) {
				t.Fatalf("rebuilt block (compression %d): %d entries, want %d", c, len(again), len(entries))
			}
			for i := range again {
				if !sameEntry(again[i], entries[i]) {
					t.Fatalf("rebuilt block (compression %d): entry %d differs", c, i)
				}
			}
		}
	})
}
