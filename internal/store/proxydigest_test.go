package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// forgeSameCRC returns a value of the same length and CRC-32C as v but
// other bytes: its first byte changed, its last four chosen so the CRC
// comes out the same (the CRC is affine in the message bits, so the four
// bytes solve a 32×32 linear system over GF(2)). It is what an attacker
// who can alter a fetch answer sends.
func forgeSameCRC(t *testing.T, v []byte) []byte {
	t.Helper()
	if len(v) < 5 {
		t.Fatal("value too short to forge")
	}
	f := bytes.Clone(v)
	f[0] ^= 0xff
	n := len(f)
	zero := make([]byte, n)
	base := crc(zero)
	// g(p) = crc(p) ^ crc(0…0) is linear in p; col[i] = g(bit i of the tail).
	var col [32]uint32
	for i := range 32 {
		e := make([]byte, n)
		e[n-4+i/8] = 1 << (i % 8)
		col[i] = crc(e) ^ base
	}
	copy(f[n-4:], []byte{0, 0, 0, 0})
	want := crc(v) ^ crc(f) // the change g(tail) must make
	// Gaussian elimination: rows are output bits, columns tail bits.
	var rows [32]uint64 // bits 0..31: coefficients; bit 32: right-hand side
	for r := range 32 {
		for c := range 32 {
			if col[c]>>r&1 == 1 {
				rows[r] |= 1 << c
			}
		}
		if want>>r&1 == 1 {
			rows[r] |= 1 << 32
		}
	}
	pivot := make([]int, 32)
	r := 0
	for c := 0; c < 32 && r < 32; c++ {
		p := -1
		for i := r; i < 32; i++ {
			if rows[i]>>c&1 == 1 {
				p = i
				break
			}
		}
		if p < 0 {
			continue
		}
		rows[r], rows[p] = rows[p], rows[r]
		for i := range 32 {
			if i != r && rows[i]>>c&1 == 1 {
				rows[i] ^= rows[r]
			}
		}
		pivot[r] = c
		r++
	}
	var tail uint32
	for i := 0; i < r; i++ {
		if rows[i]>>32&1 == 1 {
			tail |= 1 << pivot[i]
		}
	}
	binary.LittleEndian.PutUint32(f[n-4:], tail)
	if crc(f) != crc(v) || len(f) != len(v) || bytes.Equal(f, v) {
		t.Fatalf("forging failed: crc %08x want %08x", crc(f), crc(v))
	}
	return f
}

// forger answers every fetch with forgeSameCRC of the true value.
type forger struct {
	t   *testing.T
	src *Store
}

func (f forger) Fetch(ctx context.Context, asOf uint64, items []FetchItem) error {
	v, err := f.src.View()
	if err != nil {
		return err
	}
	defer v.Close()
	for i := range items {
		val, _, _, err := v.GetAt(items[i].Key, asOf)
		if err != nil {
			return err
		}
		items[i].Value = forgeSameCRC(f.t, val)
	}
	return nil
}

// A fetched value with the length and CRC of the true one but other bytes
// is refused by its digest, counted, and neither served nor cached; the
// true value is served after.
func TestProxyRefusesForgedFetchedValue(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("a", "the genuine value of a"))
	mustWrite(t, root, set("b", "2"))
	px, _ := openProxy(t, root, ProxyOptions{Window: 1})
	replicate(t, root, px, 10)
	rec, err := decodeRecord(rawGet(t, px, dataKey(nil, []byte("a"))))
	if err != nil || rec.kind != recRemote || !rec.hasDigest || rec.digest != ValueDigestOf([]byte("the genuine value of a")) {
		t.Fatalf("remote record %+v %v", rec, err)
	}
	it := fetchItem([]byte("a"), rec)
	forged := forgeSameCRC(t, []byte("the genuine value of a"))
	if it.Check(forged) {
		t.Fatal("Check accepts a forged value of the same length and CRC")
	}
	noDigest := it
	noDigest.HasDigest = false
	if !noDigest.Check(forged) {
		t.Fatal("the forged value does not even pass length and CRC: the test proves nothing")
	}

	before := integrityErrors(px, "remote_value")
	px.SetFetcher(forger{t: t, src: root})
	_, err = px.Lookup([][]byte{[]byte("a")}, func(_ uint64, _ int, v []byte, _ uint64, _ bool) error {
		return fmt.Errorf("served %q", v)
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("forged value: %v", err)
	}
	if got := integrityErrors(px, "remote_value"); got != before+1 {
		t.Fatalf("remote_value errors %v, want %v", got, before+1)
	}
	if px.ProxyStats().CachedValues != 1 { // b, the window
		t.Fatalf("cached values %d after a forged fetch", px.ProxyStats().CachedValues)
	}
	px.SetFetcher(&storeFetcher{src: root})
	if _, got := lookupAll(t, px, "a"); got["a"] != "the genuine value of a" {
		t.Fatalf("a = %q", got["a"])
	}
}

// Remote records written before digests (length and CRC only) still read,
// and fetched values are checked by length and CRC.
func TestProxyReadsRemoteRecordsWithoutDigest(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("a", "old style"))
	mustWrite(t, root, set("b", "2"))
	px, _ := openProxy(t, root, ProxyOptions{Window: 1})
	replicate(t, root, px, 10)
	k := dataKey(nil, []byte("a"))
	rec, err := decodeRecord(rawGet(t, px, k))
	if err != nil || rec.kind != recRemote {
		t.Fatalf("remote record %+v %v", rec, err)
	}
	rawSet(t, px, k, encodeRemote(nil, rec.index, rec.attrs, rec.valueLen, rec.valueCRC, nil))
	if _, got := lookupAll(t, px, "a"); got["a"] != "old style" {
		t.Fatalf("a = %q", got["a"])
	}
	mustVerify(t, px)
}

// A value the proxy evicts from its cache gets a remote record with its
// digest, whether it was stored inline or in chunks.
func TestProxyEvictionKeepsTheDigest(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{ChunkBytes: 4096, Logger: quietLogger()})
	small, big := []byte("small value"), pattern(3, 20000)
	mustWrite(t, root, setb("small", small))
	mustWrite(t, root, setb("big", big))
	for i := range 5 {
		mustWrite(t, root, set(fmt.Sprintf("z%d", i), "x"))
	}
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1})
	replicate(t, root, px, 1) // entry by entry: each value stored in the window, then evicted
	for k, v := range map[string][]byte{"small": small, "big": big} {
		key := dataKey(nil, []byte(k))
		waitFor(t, k+" evicted", func() bool {
			rec, err := decodeRecord(rawGet(t, px, key))
			return err == nil && rec.kind == recRemote
		})
		rec, _ := decodeRecord(rawGet(t, px, key))
		if !rec.hasDigest || rec.digest != ValueDigestOf(v) {
			t.Fatalf("%s: evicted record %+v has no or a wrong digest", k, rec)
		}
	}
	if _, got := lookupAll(t, px, "small", "big"); got["small"] != string(small) || got["big"] != string(big) {
		t.Fatal("evicted values read back differently")
	}
}
