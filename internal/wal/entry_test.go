package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// sampleEntries covers every shape of entry the format has: heartbeat, data
// with sets (with and without client flags) and deletes, empty values, binary keys, long (multi-byte
// varint) lengths, and extreme indexes and times.
func sampleEntries() []Entry {
	long := bytes.Repeat([]byte{0xab}, 300) // 2-byte length varints
	return []Entry{
		{Index: 1, Time: 1, Kind: KindHeartbeat},
		{Index: 2, Time: 1_700_000_000_000_000_000, Kind: KindData, Ops: []Op{
			{Type: OpSet, Key: []byte("a"), Value: []byte("1")},
		}},
		{Index: 3, Time: -5, Kind: KindData, Ops: []Op{
			{Type: OpSet, Key: []byte("k"), Value: []byte{}},
			{Type: OpDelete, Key: []byte("gone")},
			{Type: OpSet, Key: []byte{0, 0xff, '\n'}, Value: long},
			{Type: OpSet, Key: long, Value: []byte("v")},
			{Type: OpSet, Key: []byte("f"), Value: []byte("x"), Flags: 123},
			{Type: OpSet, Key: []byte("g"), Value: long, Flags: 1<<32 - 1},
			{Type: OpSet, Key: []byte("h"), Value: []byte("y"), Expires: 1_700_000_060_000_000_000},
			{Type: OpSet, Key: []byte("i"), Value: nil, Flags: 2, Expires: -1},
		}},
		{Index: 1<<64 - 1, Time: -1 << 63, Kind: KindData},
	}
}

func TestBodyRoundTrip(t *testing.T) {
	for _, e := range sampleEntries() {
		body := e.AppendBody(nil)
		if len(body) != e.BodySize() {
			t.Errorf("entry %d: BodySize %d, encoded %d bytes", e.Index, e.BodySize(), len(body))
		}
		got, err := DecodeBody(body)
		if err != nil {
			t.Fatalf("entry %d: %v", e.Index, err)
		}
		if !sameEntry(e, got) {
			t.Fatalf("entry %d: decoded %+v, want %+v", e.Index, got, e)
		}
		if again := got.AppendBody(nil); !bytes.Equal(again, body) {
			t.Fatalf("entry %d: re-encoding differs:\n%x\n%x", e.Index, again, body)
		}
		// AppendBody appends: a prefix is kept.
		if b := e.AppendBody([]byte("xx")); !bytes.Equal(b[2:], body) || string(b[:2]) != "xx" {
			t.Fatalf("entry %d: AppendBody does not append", e.Index)
		}
	}
}

// sameEntry compares entries, treating nil and empty values as equal (an
// empty set value decodes as an empty, non-nil slice).
func sameEntry(a, b Entry) bool {
	if a.Index != b.Index || a.Time != b.Time || a.Kind != b.Kind || a.Hash != b.Hash || len(a.Ops) != len(b.Ops) {
		return false
	}
	for i := range a.Ops {
		x, y := a.Ops[i], b.Ops[i]
		if x.Type != y.Type || x.Flags != y.Flags || x.Expires != y.Expires || !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) {
			return false
		}
	}
	return true
}

func TestDecodeBodyRejects(t *testing.T) {
	good := (&Entry{Index: 7, Time: 9, Kind: KindData, Ops: []Op{{Type: OpSet, Key: []byte("k"), Value: []byte("v")}}}).AppendBody(nil)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	header := func(kind byte) []byte {
		b := []byte{bodyVersion, kind}
		b = binary.BigEndian.AppendUint64(b, 1)
		return binary.BigEndian.AppendUint64(b, 0)
	}
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "shorter than its header"},
		{"short header", good[:17], "shorter than its header"},
		{"version", mut(func(b []byte) []byte { b[0] = 2; return b }), "unknown body version"},
		{"kind", mut(func(b []byte) []byte { b[1] = 9; return b }), "unknown entry kind"},
		{"no op count", good[:18], "bad op count"},
		{"op type", mut(func(b []byte) []byte { b[19] = 7; return b }), "unknown type"},
		{"truncated value", good[:len(good)-1], "value"},
		{"trailing", append(append([]byte(nil), good...), 0), "trailing"},
		{"heartbeat with ops", append(header(byte(KindHeartbeat)), 1, byte(OpDelete), 1, 'k'), "heartbeat with"},
		{"empty key", append(header(byte(KindData)), 1, byte(OpDelete), 0), "empty key"},
		{"key too long", binary.AppendUvarint(append(header(byte(KindData)), 1, byte(OpDelete)), MaxKeyLen+1), "over limit"},
		{"op count beyond input", append(header(byte(KindData)), 100, byte(OpDelete), 1, 'k'), "ops in"},
		{"op count over MaxOps", binary.AppendUvarint(header(byte(KindData)), MaxOps+1), "bad op count"},
		// Lengths must be minimal varints, or a decoded body would not
		// re-encode to the bytes it came from.
		{"non-minimal op count", append(header(byte(KindData)), 0x81, 0x00, byte(OpDelete), 1, 'k'), "bad op count"},
		{"non-minimal key length", append(header(byte(KindData)), 1, byte(OpDelete), 0x81, 0x00, 'k'), "key"},
		// A set with flags 0 has one encoding only: type 1.
		{"attributes with flags 0", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', attrFlags, 0, 0, 0, 0, 1, 'v'), "flags attribute of 0"},
		{"attributes with expiry 0", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', attrExpires, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'v'), "expiry attribute of 0"},
		{"empty attribute mask", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', 0, 1, 'v'), "attribute mask"},
		{"unknown attribute", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', 4, 1, 'v'), "attribute mask"},
		{"attributes truncated", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k'), "attributes truncated"},
		{"flags truncated", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', attrFlags, 0, 0), "flags truncated"},
		{"expiry truncated", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', attrFlags|attrExpires, 0, 0, 0, 1, 0, 0), "expiry truncated"},
		{"value after attributes truncated", append(header(byte(KindData)), 1, opSetAttrs, 1, 'k', attrFlags, 0, 0, 0, 7, 2, 'v'), "value"},
	}
	for _, c := range cases {
		_, err := DecodeBody(c.body)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: want ErrMalformed, got %v", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.want)
		}
	}
}

func TestSealAndVerifier(t *testing.T) {
	entries := sampleEntries()[:3]
	var prev Hash
	var buf []byte
	for i := range entries {
		body := entries[i].Seal(prev, buf)
		if want := ChainHash(prev, entries[i].AppendBody(nil)); entries[i].Hash != want || !bytes.Equal(body, entries[i].AppendBody(nil)) {
			t.Fatalf("Seal of entry %d: hash %s, want %s", entries[i].Index, entries[i].Hash, want)
		}
		prev = entries[i].Hash
		buf = body
	}
	if entries[0].Hash == entries[1].Hash || entries[0].Hash == (Hash{}) {
		t.Fatal("hashes do not differ")
	}

	var v Verifier
	for i := range entries {
		if err := v.Check(&entries[i]); err != nil {
			t.Fatal(err)
		}
	}
	if v.Index != 3 || v.Hash != entries[2].Hash {
		t.Fatalf("verifier at %d %s", v.Index, v.Hash)
	}

	// Each kind of break is refused and leaves the verifier where it was.
	next := Entry{Index: 4, Time: 10, Kind: KindData, Ops: []Op{{Type: OpDelete, Key: []byte("a")}}}
	next.Seal(v.Hash, nil)
	breaks := map[string]func(e *Entry){
		"gap":        func(e *Entry) { e.Index = 5 },
		"duplicate":  func(e *Entry) { e.Index = 3 },
		"bad hash":   func(e *Entry) { e.Hash[0] ^= 1 },
		"body flip":  func(e *Entry) { e.Ops = []Op{{Type: OpDelete, Key: []byte("b")}} },
		"time moved": func(e *Entry) { e.Time++ },
	}
	for name, br := range breaks {
		e := next
		e.Ops = append([]Op(nil), next.Ops...)
		br(&e)
		if err := v.Check(&e); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if v.Index != 3 || v.Hash != entries[2].Hash {
			t.Fatalf("%s: verifier moved to %d", name, v.Index)
		}
	}
	if err := v.Check(&next); err != nil {
		t.Fatal(err)
	}

	// Chain from a non-zero base, as after log truncation.
	w := Verifier{Index: entries[0].Index, Hash: entries[0].Hash}
	for i := 1; i < 3; i++ {
		if err := w.Check(&entries[i]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpAndKindNames(t *testing.T) {
	if OpSet.String() != "set" || OpDelete.String() != "del" || OpType(9).String() != "op(9)" {
		t.Fatal("op names")
	}
	if h := (Hash{1}).String(); len(h) != 64 || !strings.HasPrefix(h, "01") {
		t.Fatalf("hash string %q", h)
	}
}

// TestUnflaggedEncodingIsUnchanged: a set without attributes encodes as
// it did before they existed (type 1), so old logs decode and hash the
// same; flags other than 0 or an expiry use type 3 and an attribute mask.
func TestUnflaggedEncodingIsUnchanged(t *testing.T) {
	plain := (&Entry{Index: 1, Time: 2, Kind: KindData, Ops: []Op{{Type: OpSet, Key: []byte("k"), Value: []byte("v")}}}).AppendBody(nil)
	want := append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{1, 1}, 1), 2), 1, 1, 1, 'k', 1, 'v')
	if !bytes.Equal(plain, want) {
		t.Fatalf("unflagged set encodes as %x, want %x", plain, want)
	}
	flagged := (&Entry{Index: 1, Time: 2, Kind: KindData, Ops: []Op{{Type: OpSet, Key: []byte("k"), Value: []byte("v"), Flags: 0x01020304}}}).AppendBody(nil)
	want = append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{1, 1}, 1), 2), 1, 3, 1, 'k', attrFlags, 1, 2, 3, 4, 1, 'v')
	if !bytes.Equal(flagged, want) {
		t.Fatalf("flagged set encodes as %x, want %x", flagged, want)
	}
	e, err := DecodeBody(flagged)
	if err != nil || e.Ops[0].Type != OpSet || e.Ops[0].Flags != 0x01020304 {
		t.Fatalf("decoded %+v, %v", e.Ops, err)
	}
}

func TestValueOffsets(t *testing.T) {
	e := Entry{Index: 7, Time: 1, Kind: KindData, Ops: []Op{
		{Type: OpSet, Key: []byte("a"), Value: []byte("first")},
		{Type: OpDelete, Key: []byte("bb")},
		{Type: OpSet, Key: []byte("ccc"), Value: bytes.Repeat([]byte("x"), 300)},
		{Type: OpSet, Key: []byte("dd"), Value: []byte("flagged"), Flags: 9},
		{Type: OpSet, Key: []byte("e"), Value: []byte("expiring"), Flags: 9, Expires: 77},
	}}
	body := e.AppendBody(nil)
	offs := e.ValueOffsets(nil)
	if len(offs) != 5 || offs[1] != -1 {
		t.Fatalf("offsets %v", offs)
	}
	for i, op := range e.Ops {
		if offs[i] < 0 {
			continue
		}
		if got := body[offs[i] : offs[i]+len(op.Value)]; !bytes.Equal(got, op.Value) {
			t.Fatalf("op %d: value at offset %d is %q", i, offs[i], got)
		}
	}
	var b BlockBuilder
	b.Add([]byte("padding-body"), Hash{}, 0)
	at := b.AddEntry(&e, Hash{}, false)
	blk := b.Finish(nil, CompressNone)
	_, c, payload, err := ParseBlockHeader(blk)
	if err != nil || c != CompressNone {
		t.Fatal(err, c)
	}
	if got := payload[at+offs[2] : at+offs[2]+300]; !bytes.Equal(got, e.Ops[2].Value) {
		t.Fatal("value not found at body offset in the block payload")
	}
}
