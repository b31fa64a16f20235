package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// chain builds n sealed data entries starting at index first, with values
// of valueLen bytes (compressible when repetitive).
func chain(first uint64, n, valueLen int, prev Hash) []Entry {
	out := make([]Entry, n)
	for i := range out {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, valueLen)
		out[i] = Entry{Index: first + uint64(i), Time: int64(1000 + i), Kind: KindData, Ops: []Op{
			{Type: OpSet, Key: []byte(fmt.Sprintf("key-%d", i)), Value: v},
			{Type: OpDelete, Key: []byte(fmt.Sprintf("old-%d", i))},
		}}
		out[i].Seal(prev, nil)
		prev = out[i].Hash
	}
	return out
}

func build(entries []Entry, c Compression) []byte {
	var b BlockBuilder
	for i := range entries {
		b.Add(entries[i].AppendBody(nil), entries[i].Hash, entries[i].Time)
	}
	return b.Finish(nil, c)
}

func TestBlockRoundTripEachCompression(t *testing.T) {
	for _, tc := range []struct {
		c        Compression
		valueLen int
		want     Compression // what the block ends up using
	}{
		{CompressNone, 100, CompressNone},
		{CompressZstd, 100, CompressZstd},
		{CompressSnappy, 100, CompressSnappy},
		// Below minCompress the payload is stored as is.
		{CompressZstd, 0, CompressNone},
		{CompressSnappy, 0, CompressNone},
	} {
		n := 5
		if tc.valueLen == 0 {
			n = 1
		}
		entries := chain(10, n, tc.valueLen, Hash{})
		blk := build(entries, tc.c)
		h, c, _, err := ParseBlockHeader(blk)
		if err != nil {
			t.Fatal(err)
		}
		if c != tc.want || h.Count != n || h.LastTime != entries[n-1].Time {
			t.Fatalf("compression %d: header %+v, compression %d", tc.c, h, c)
		}
		got, err := DecodeBlock(blk)
		if err != nil {
			t.Fatalf("compression %d: %v", tc.c, err)
		}
		if len(got) != n {
			t.Fatalf("compression %d: %d entries", tc.c, len(got))
		}
		for i := range got {
			if !sameEntry(got[i], entries[i]) {
				t.Fatalf("compression %d: entry %d = %+v, want %+v", tc.c, i, got[i], entries[i])
			}
		}
		// Decoded entries do not alias the block.
		for i := range blk {
			blk[i] = 0
		}
		if !sameEntry(got[0], entries[0]) {
			t.Fatalf("compression %d: decoded entry aliases the block", tc.c)
		}
	}
}

func TestIncompressiblePayloadStoredRaw(t *testing.T) {
	// Random-looking values do not compress; the block must say so.
	e := Entry{Index: 1, Kind: KindData}
	v := make([]byte, 4096)
	x := uint32(1)
	for i := range v {
		x = x*1664525 + 1013904223
		v[i] = byte(x >> 24)
	}
	e.Ops = []Op{{Type: OpSet, Key: []byte("k"), Value: v}}
	e.Seal(Hash{}, nil)
	for _, c := range []Compression{CompressZstd, CompressSnappy} {
		blk := build([]Entry{e}, c)
		if _, got, _, _ := ParseBlockHeader(blk); got != CompressNone {
			t.Errorf("compression %d kept for incompressible payload", c)
		}
		if _, err := DecodeBlock(blk); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBlockBuilderReset(t *testing.T) {
	var b BlockBuilder
	e := chain(1, 3, 10, Hash{})
	for i := range e {
		b.Add(e[i].AppendBody(nil), e[i].Hash, e[i].Time)
	}
	b.Reset()
	if b.Len() != 0 {
		t.Fatal("Reset kept entries")
	}
	b.Add(e[2].AppendBody(nil), e[2].Hash, e[2].Time)
	got, err := DecodeBlock(b.Finish([]byte("prefix")[6:], CompressZstd))
	if err != nil || len(got) != 1 || got[0].Index != 3 {
		t.Fatalf("after reset: %v %+v", err, got)
	}
}

func TestBlockLastHash(t *testing.T) {
	for _, c := range []Compression{CompressNone, CompressZstd, CompressSnappy} {
		entries := chain(1, 4, 200, Hash{})
		h, err := BlockLastHash(build(entries, c))
		if err != nil || h != entries[3].Hash {
			t.Fatalf("compression %d: %s %v, want %s", c, h, err, entries[3].Hash)
		}
	}
	if _, err := BlockLastHash([]byte{blockVersion, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'x'}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short payload: %v", err)
	}
}

func TestBlockVerifiesAcrossBlocks(t *testing.T) {
	all := chain(1, 9, 50, Hash{})
	var v Verifier
	for _, part := range [][]Entry{all[:4], all[4:5], all[5:]} {
		got, err := DecodeBlock(build(part, CompressZstd))
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if err := v.Check(&got[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v.Index != 9 {
		t.Fatalf("verified up to %d", v.Index)
	}
}

func TestDecodeBlockRejects(t *testing.T) {
	entries := chain(1, 3, 100, Hash{})
	good := map[Compression][]byte{}
	for _, c := range []Compression{CompressNone, CompressZstd, CompressSnappy} {
		good[c] = build(entries, c)
	}
	header := func(c Compression, count, rawLen uint64) []byte {
		b := []byte{blockVersion, byte(c)}
		b = binary.AppendUvarint(b, count)
		b = binary.BigEndian.AppendUint64(b, 0)
		return binary.AppendUvarint(b, rawLen)
	}
	cases := map[string][]byte{
		"empty":              nil,
		"version":            append([]byte{9}, good[CompressNone][1:]...),
		"compression":        append([]byte{blockVersion, 7}, good[CompressNone][2:]...),
		"zero count":         header(CompressNone, 0, 0),
		"truncated header":   good[CompressNone][:5],
		"raw length":         append(header(CompressNone, 1, MaxBlockRaw+1), 'x'),
		"truncated payload":  good[CompressNone][:len(good[CompressNone])-1],
		"truncated zstd":     good[CompressZstd][:len(good[CompressZstd])-3],
		"truncated snappy":   good[CompressSnappy][:len(good[CompressSnappy])-3],
		"trailing record":    append(append([]byte(nil), good[CompressNone]...), 0),
		"count too high":     append(header(CompressNone, 4, uint64(len(good[CompressNone])-12)), good[CompressNone][12:]...),
		"count beyond bytes": append(header(CompressNone, 1000, 3), 1, 2, 3),
		// A tiny block claiming a huge snappy payload must be refused
		// before anything of that size is allocated.
		"snappy bomb": append(header(CompressSnappy, 1, 1<<29), binary.AppendUvarint(nil, 1<<29)...),
		"zstd claims": append(header(CompressZstd, 1, 1<<29), 0x28, 0xb5, 0x2f, 0xfd),
	}
	for name, blk := range cases {
		if _, err := DecodeBlock(blk); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: want ErrMalformed, got %v", name, err)
		}
	}
	// A flipped bit in an uncompressed body decodes (the block has no
	// checksum of its own) but breaks the hash chain.
	blk := append([]byte(nil), good[CompressNone]...)
	blk[len(blk)-40] ^= 0x01 // inside the last entry's value
	got, err := DecodeBlock(blk)
	if err != nil {
		t.Fatal(err)
	}
	var v Verifier
	for i := range got {
		if err = v.Check(&got[i]); err != nil {
			break
		}
	}
	if err == nil || v.Index != 2 {
		t.Fatalf("flipped body: verifier reached %d, err %v", v.Index, err)
	}
}

func TestParseCompression(t *testing.T) {
	for s, want := range map[string]Compression{"": CompressZstd, "zstd": CompressZstd, "snappy": CompressSnappy, "none": CompressNone} {
		if got, err := ParseCompression(s); err != nil || got != want {
			t.Errorf("%q: %d %v", s, got, err)
		}
	}
	if _, err := ParseCompression("lz4"); err == nil {
		t.Error("lz4 accepted")
	}
}

func TestDecodeBlockAllocatesBoundedForTinyInput(t *testing.T) {
	// Tiny blocks claiming a payload near MaxBlockRaw must not allocate
	// that much before finding out they are malformed.
	for _, c := range []Compression{CompressZstd, CompressSnappy} {
		blk := append([]byte{blockVersion, byte(c), 1, 0, 0, 0, 0, 0, 0, 0, 0}, binary.AppendUvarint(nil, MaxBlockRaw)...)
		if c == CompressZstd {
			blk = append(blk, 0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0)
		} else {
			blk = binary.AppendUvarint(blk, MaxBlockRaw)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := DecodeBlock(blk); err == nil {
			t.Fatalf("compression %d: accepted", c)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
			t.Errorf("compression %d: decoding a %d-byte block allocated %d MiB", c, len(blk), n>>20)
		}
	}
}

func TestBlockHighlyCompressible(t *testing.T) {
	// The expansion bounds decompress applies must admit the best ratios
	// the encoders reach (long runs of one byte).
	for _, c := range []Compression{CompressZstd, CompressSnappy} {
		e := Entry{Index: 1, Kind: KindData, Ops: []Op{{Type: OpSet, Key: []byte("zeros"), Value: make([]byte, 8<<20)}}}
		e.Seal(Hash{}, nil)
		blk := build([]Entry{e}, c)
		if _, got, _, _ := ParseBlockHeader(blk); got != c {
			t.Fatalf("compression %d not used", c)
		}
		got, err := DecodeBlock(blk)
		if err != nil || len(got) != 1 || len(got[0].Ops[0].Value) != 8<<20 {
			t.Fatalf("compression %d (%d bytes for 8 MiB): %v", c, len(blk), err)
		}
		if h, err := BlockLastHash(blk); err != nil || h != e.Hash {
			t.Fatalf("compression %d: last hash %v", c, err)
		}
	}
}

// AddEntry must produce exactly the block and hashes of Seal + Add (the
// format and the hash chain are the protocol), and Parts exactly Finish.
func TestAddEntryMatchesSealAndAdd(t *testing.T) {
	want := chain(7, 4, 3000, Hash{5})
	var ref, got BlockBuilder
	prev := Hash{5}
	for i := range want {
		ref.Add(want[i].AppendBody(nil), want[i].Hash, want[i].Time)
		e := want[i]
		e.Hash = Hash{}
		at := got.AddEntry(&e, prev, true)
		if e.Hash != want[i].Hash {
			t.Fatalf("entry %d: hash %s, want %s", i, e.Hash, want[i].Hash)
		}
		if want := ref.RawLen() - 32 - want[i].BodySize(); at != want {
			t.Fatalf("entry %d: body at %d, want %d", i, at, want)
		}
		prev = e.Hash
	}
	// A replicated entry keeps its own hash.
	e := chain(11, 1, 10, prev)[0]
	ref.Add(e.AppendBody(nil), e.Hash, e.Time)
	got.AddEntry(&e, Hash{}, false)
	for _, c := range []Compression{CompressNone, CompressZstd, CompressSnappy} {
		a, b := ref.Finish(nil, c), got.Finish(nil, c)
		if !bytes.Equal(a, b) {
			t.Fatalf("compression %d: blocks differ", c)
		}
		hdr, payload := got.Parts([]byte("x"), c)
		if !bytes.Equal(append(hdr[1:], payload...), a) || hdr[0] != 'x' {
			t.Fatalf("compression %d: Parts differs from Finish", c)
		}
	}
}
