package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

func setf(k string, v []byte, flags uint32) wal.Op {
	return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: v, Flags: flags}
}

// lookupItems reads keys through LookupItems; absent keys are left out.
func lookupItems(t *testing.T, s *Store, keys ...string) map[string]Item {
	t.Helper()
	kb := make([][]byte, len(keys))
	for i, k := range keys {
		kb[i] = []byte(k)
	}
	out := map[string]Item{}
	if _, err := s.LookupItems(kb, func(_ uint64, i int, it Item, found bool) error {
		if found {
			it.Value = bytes.Clone(it.Value)
			out[keys[i]] = it
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// flagsSample writes a value of each placement (inline, in the log,
// chunked) with client flags, and one without, and returns what each key
// must read as.
func flagsSample(t *testing.T, s *Store) map[string]Item {
	t.Helper()
	want := map[string]Item{
		"inline":  {Value: []byte("small"), Flags: 7},
		"inlog":   {Value: pattern(1, 2000), Flags: 1<<32 - 1},
		"chunked": {Value: pattern(2, 10000), Flags: 9},
		"plain":   {Value: []byte("no flags")},
	}
	for _, k := range []string{"inline", "inlog", "chunked", "plain"} {
		r := mustWrite(t, s, setf(k, want[k].Value, want[k].Flags))
		it := want[k]
		it.Index = r.Index
		want[k] = it
	}
	return want
}

func checkItems(t *testing.T, what string, s *Store, want map[string]Item) {
	t.Helper()
	// Twice: from the store, then from the read cache.
	for range 2 {
		got := lookupItems(t, s, "inline", "inlog", "chunked", "plain", "absent")
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys found, want %d", what, len(got), len(want))
		}
		for k, w := range want {
			g := got[k]
			if g.Flags != w.Flags || g.Index != w.Index || !bytes.Equal(g.Value, w.Value) {
				t.Fatalf("%s: %s reads flags %d index %d (%d bytes), want flags %d index %d (%d bytes)",
					what, k, g.Flags, g.Index, len(g.Value), w.Flags, w.Index, len(w.Value))
			}
		}
	}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	it, found, err := v.GetItem([]byte("chunked"))
	if err != nil || !found || it.Flags != want["chunked"].Flags {
		t.Fatalf("%s: GetItem: %+v %v %v", what, it.Flags, found, err)
	}
}

// TestClientFlagsStoredWithValues: client flags written with a set are
// read back with its value wherever the value is kept (inline, in the
// log, in chunks), after a restart, at a replica and at a proxy (whose
// fetched values get the flags of its own record); values without flags
// read as 0; the stored data verifies.
func TestClientFlagsStoredWithValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := openTest(t, Options{Dir: dir, ChunkBytes: 4096})
	want := flagsSample(t, root)
	checkItems(t, "root", root, want)
	mustVerify(t, root)

	replica := openTest(t, Options{Name: dbName(t), DBID: root.DBID(), ChunkBytes: 4096})
	replicate(t, root, replica, 2)
	checkItems(t, "replica", replica, want)
	mustVerify(t, replica)

	px, f := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1})
	replicate(t, root, px, 1)
	// Values still held after apply are answered locally: wait until
	// only the window's entry is.
	waitFor(t, "eviction down to the window", func() bool { return px.ProxyStats().CachedValues <= 1 })
	checkItems(t, "proxy", px, want)
	if f.calls.Load() == 0 {
		t.Fatal("the proxy fetched no value: its remote records were not read")
	}
	// Digests cover the attributes: equal on every node with them.
	d, n := digest(t, root)
	for _, s := range []*Store{replica, px} {
		if d2, n2 := digest(t, s); d2 != d || n2 != n {
			t.Fatalf("digest differs from the root's")
		}
	}
	mustWrite(t, root, setf("inline", []byte("small"), 8))
	if d2, _ := digest(t, root); d2 == d {
		t.Fatal("a change of client flags leaves the digest as it was")
	}

	root.Close()
	reopened := openTest(t, Options{Dir: dir, ChunkBytes: 4096})
	want["inline"] = Item{Value: []byte("small"), Flags: 8, Index: root.AppliedIndex()}
	checkItems(t, "reopened root", reopened, want)
}

// TestClientFlagsChangeIsAWrite: a set that changes only the client flags
// of a value is a write; one that changes neither is a no-op, also within
// one batch.
func TestClientFlagsChangeIsAWrite(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	first := mustWrite(t, s, setf("k", []byte("v"), 5))
	if r := mustWrite(t, s, setf("k", []byte("v"), 5)); r.Changed {
		t.Fatalf("same value and flags: written at %d", r.Index)
	}
	for _, flags := range []uint32{6, 0, 6} {
		r := mustWrite(t, s, setf("k", []byte("v"), flags))
		if !r.Changed || r.Index <= first.Index {
			t.Fatalf("flags %d: %+v", flags, r)
		}
		if got := lookupItems(t, s, "k")["k"]; got.Flags != flags || got.Index != r.Index {
			t.Fatalf("flags %d: read %+v", flags, got)
		}
	}
	r := mustWrite(t, s, setf("b", []byte("x"), 1), setf("b", []byte("x"), 2), setf("c", []byte("y"), 0))
	if got := lookupItems(t, s, "b", "c"); got["b"].Flags != 2 || got["c"].Flags != 0 || got["b"].Index != r.Index {
		t.Fatalf("batch: %+v", got)
	}
	if r := mustWrite(t, s, setf("b", []byte("x"), 2), setf("b", []byte("x"), 2)); r.Changed {
		t.Fatalf("batch rewriting the same value and flags: written at %d", r.Index)
	}
}

// TestDeleteWithFlagsRefused: a delete carries no flags; one that does is
// refused and changes nothing.
func TestDeleteWithFlagsRefused(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	mustWrite(t, s, setf("k", []byte("v"), 3))
	_, err := s.Write(context.Background(), Batch{Ops: []wal.Op{{Type: wal.OpDelete, Key: []byte("k"), Flags: 1}}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("delete with flags: %v", err)
	}
	if got := lookupItems(t, s, "k")["k"]; got.Flags != 3 || string(got.Value) != "v" {
		t.Fatalf("after the refused delete: %+v", got)
	}
}

// TestRecordsWithoutClientFlagsUnchanged: a record of a value without
// client flags is encoded as before flags existed (so data written then
// reads as flags 0), and one with flags adds them after the index.
func TestRecordsWithoutClientFlagsUnchanged(t *testing.T) {
	t.Parallel()
	plain := encodeInline(nil, 5, valueAttrs{}, []byte("v"))
	if len(plain) != recHeader+1 || plain[4] != 0 {
		t.Fatalf("inline record without flags: %x", plain)
	}
	flagged := encodeInline(nil, 5, valueAttrs{flags: 0xabcd}, []byte("v"))
	if len(flagged) != recHeader+4+1 || flagged[4] != flagClient {
		t.Fatalf("inline record with flags: %x", flagged)
	}
	for _, b := range [][]byte{plain, flagged} {
		r, err := decodeRecord(b)
		if err != nil || string(r.inline) != "v" || r.index != 5 {
			t.Fatalf("%x: %+v %v", b, r, err)
		}
	}
	// Flags 0 written with the flag bit, and a lost record with it, are
	// not records this format writes.
	zero := append([]byte{0, 0, 0, 0, flagClient}, make([]byte, 8+4)...)
	lost := append([]byte{0, 0, 0, 0, flagClient | flagLost}, make([]byte, 8+4)...)
	for name, b := range map[string][]byte{"flags 0": zero, "lost with flags": lost} {
		if _, err := decodeRecord(sealed(b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
