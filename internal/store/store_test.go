package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

func openTest(t *testing.T, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 1
	}
	if o.BallastBytes == 0 {
		o.BallastBytes = -1
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func set(k, v string) wal.Op { return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(v)} }
func del(k string) wal.Op    { return wal.Op{Type: wal.OpDelete, Key: []byte(k)} }

func mustWrite(t *testing.T, s *Store, ops ...wal.Op) WriteResult {
	t.Helper()
	r, err := s.Write(context.Background(), Batch{Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func get(t *testing.T, s *Store, k string) (string, uint64, bool) {
	t.Helper()
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	val, idx, ok, err := v.Get([]byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return string(val), idx, ok
}

func TestWriteReadDeleteAndNoop(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	r := mustWrite(t, s, set("a", "1"), set("b", "2"))
	if r.Index != 1 || !r.Changed {
		t.Fatalf("first write: %+v", r)
	}
	if v, idx, ok := get(t, s, "a"); !ok || v != "1" || idx != 1 {
		t.Fatalf("get a = %q %d %v", v, idx, ok)
	}
	// Identical rewrite: no entry.
	r = mustWrite(t, s, set("a", "1"))
	if r.Changed || r.Index != 1 {
		t.Fatalf("noop write: %+v", r)
	}
	if s.AppliedIndex() != 1 {
		t.Fatalf("applied %d after noop", s.AppliedIndex())
	}
	r = mustWrite(t, s, del("a"), del("nope"))
	if r.Index != 2 {
		t.Fatalf("delete: %+v", r)
	}
	if _, _, ok := get(t, s, "a"); ok {
		t.Fatal("a still present")
	}
	// Delete of a missing key is a no-op.
	if r = mustWrite(t, s, del("a")); r.Changed {
		t.Fatalf("delete missing: %+v", r)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != 1 || st.ValueBytes != 1 || st.KeyBytes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConditions(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	ctx := context.Background()
	if _, err := s.Write(ctx, Batch{Ops: []wal.Op{set("k", "1")}, Conds: []Cond{{Key: []byte("k"), Index: 0}}}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Write(ctx, Batch{Ops: []wal.Op{set("k", "2")}, Conds: []Cond{{Key: []byte("k"), Index: 0}}})
	if !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("want condition failed, got %v", err)
	}
	if _, err := s.Write(ctx, Batch{Ops: []wal.Op{set("k", "2")}, Conds: []Cond{{Key: []byte("k"), Index: 1}}}); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := get(t, s, "k"); v != "2" {
		t.Fatalf("k = %q", v)
	}
}

func TestChunkedValues(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{ChunkBytes: 1024})
	big := bytes.Repeat([]byte("0123456789"), 1000) // 10 chunks
	mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("big"), Value: big})
	if v, _, ok := get(t, s, "big"); !ok || v != string(big) {
		t.Fatalf("big value mismatch: %d bytes", len(v))
	}
	// Same value again is a no-op, even chunked.
	if r := mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("big"), Value: big}); r.Changed {
		t.Fatal("identical chunked rewrite produced an entry")
	}
	small := big[:1500] // 2 chunks: old chunks 2..9 must go
	mustWrite(t, s, wal.Op{Type: wal.OpSet, Key: []byte("big"), Value: small})
	if v, _, _ := get(t, s, "big"); v != string(small) {
		t.Fatal("shrunk value mismatch")
	}
	mustWrite(t, s, del("big"))
	it, _ := s.db.NewIter(nil)
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if it.Key()[0] == prefixChunk {
			t.Fatalf("chunk left behind: %q", it.Key())
		}
	}
}

func TestConcurrentWritersGroupCommit(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	var wg sync.WaitGroup
	const writers, per = 8, 50
	seen := make(chan uint64, writers*per)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				r, err := s.Write(context.Background(), Batch{Ops: []wal.Op{set(fmt.Sprintf("w%d-%d", w, i), "v")}})
				if err != nil {
					t.Error(err)
					return
				}
				seen <- r.Index
			}
		}()
	}
	wg.Wait()
	close(seen)
	got := map[uint64]bool{}
	for i := range seen {
		if got[i] {
			t.Fatalf("index %d acknowledged twice", i)
		}
		got[i] = true
	}
	if s.AppliedIndex() != writers*per {
		t.Fatalf("applied %d, want %d", s.AppliedIndex(), writers*per)
	}
	entries, err := s.ReadLog(1, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	v := wal.Verifier{}
	for i := range entries {
		if err := v.Check(&entries[i]); err != nil {
			t.Fatal(err)
		}
	}
	if v.Index != writers*per {
		t.Fatalf("log holds %d entries", v.Index)
	}
}

func TestReopenKeepsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, set("x", "y"))
	id := s.DBID()
	s.Close()
	s2 := openTest(t, Options{Dir: dir})
	if s2.DBID() != id || s2.AppliedIndex() != 1 {
		t.Fatalf("reopened: id %s applied %d", s2.DBID(), s2.AppliedIndex())
	}
	if r := mustWrite(t, s2, set("x", "z")); r.Index != 2 {
		t.Fatalf("index after reopen %d", r.Index)
	}
	s2.Close()
	var other DBID
	other[0] = 1
	if _, err := Open(Options{Dir: dir, DBID: other}); !errors.Is(err, ErrDBIDMismatch) {
		t.Fatalf("want DBID mismatch, got %v", err)
	}
}

func TestEmptyValueRewriteIsNoop(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	mustWrite(t, s, set("e", ""))
	if r := mustWrite(t, s, set("e", "")); r.Changed {
		t.Fatalf("rewriting an empty value produced entry %d", r.Index)
	}
	// A fresh committer (after reopen) loads the empty value from disk.
	if r := mustWrite(t, s, set("e", "x")); !r.Changed {
		t.Fatal("changing an empty value was dropped")
	}
}

func TestNoopDetectionFollowsTheBatch(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	// Set then delete of a new key: the delete is not a no-op.
	mustWrite(t, s, set("n", "1"), del("n"))
	if _, _, ok := get(t, s, "n"); ok {
		t.Fatal("set;del of a new key left it behind")
	}
	mustWrite(t, s, set("k", "v"))
	// Delete then set back to the same value: both are real ops.
	if r := mustWrite(t, s, del("k"), set("k", "v")); !r.Changed {
		t.Fatal("del;set was dropped")
	}
	if v, _, ok := get(t, s, "k"); !ok || v != "v" {
		t.Fatalf("k = %q %v", v, ok)
	}
	// set a; set a (same): the second is dropped, the first kept.
	if r := mustWrite(t, s, set("k", "w"), set("k", "w")); !r.Changed {
		t.Fatal("set;set dropped both")
	}
	if v, _, _ := get(t, s, "k"); v != "w" {
		t.Fatalf("k = %q", v)
	}
}
