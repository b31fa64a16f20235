package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func writeID(t *testing.T, s *Store, id string, conds []Cond, ops ...wal.Op) (WriteResult, error) {
	t.Helper()
	return s.Write(context.Background(), Batch{Ops: ops, Conds: conds, ID: []byte(id)})
}

func countPrefix(t *testing.T, s *Store, p byte) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: []byte{p + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

func TestBatchIDAppliesOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	first, err := writeID(t, s, "b1", nil, set("k", "v1"), set("x", "1"))
	if err != nil || !first.Changed || first.Duplicate {
		t.Fatalf("first attempt: %+v %v", first, err)
	}
	mustWrite(t, s, set("k", "other"))
	again, err := writeID(t, s, "b1", nil, set("k", "v1"), set("x", "1"))
	if err != nil || !again.Duplicate || again.Index != first.Index || !again.Changed {
		t.Fatalf("retry: %+v %v (first %+v)", again, err, first)
	}
	if v, _, _ := get(t, s, "k"); v != "other" {
		t.Fatalf("retry applied again: k = %q", v)
	}
	// A different ID applies; the outcome survives a restart.
	if r, _ := writeID(t, s, "b2", nil, set("k", "v2")); r.Duplicate || !r.Changed {
		t.Fatalf("new id: %+v", r)
	}
	s.Close()
	s = openTest(t, Options{Dir: dir})
	if r, _ := writeID(t, s, "b1", nil, set("k", "v1")); !r.Duplicate || r.Index != first.Index {
		t.Fatalf("after restart: %+v", r)
	}
	mustVerify(t, s)
}

func TestBatchIDOutcomes(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	mustWrite(t, s, set("k", "v"))
	// A no-op is an outcome too: its retry stays a no-op even once the
	// key changed in between.
	noop, _ := writeID(t, s, "noop", nil, set("k", "v"))
	if noop.Changed || noop.Duplicate {
		t.Fatalf("no-op: %+v", noop)
	}
	mustWrite(t, s, set("k", "changed"))
	if r, _ := writeID(t, s, "noop", nil, set("k", "v")); !r.Duplicate || r.Changed || r.Index != noop.Index {
		t.Fatalf("no-op retry: %+v", r)
	}
	if v, _, _ := get(t, s, "k"); v != "changed" {
		t.Fatalf("no-op retry applied: %q", v)
	}
	// A failed condition records nothing: the retry is evaluated afresh.
	_, err := writeID(t, s, "cas", []Cond{{Key: []byte("k"), Index: 1}}, set("k", "cas"))
	if !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("condition: %v", err)
	}
	_, idx, _ := get(t, s, "k")
	r, err := writeID(t, s, "cas", []Cond{{Key: []byte("k"), Index: idx}}, set("k", "cas"))
	if err != nil || r.Duplicate || !r.Changed {
		t.Fatalf("retry after a failed condition: %+v %v", r, err)
	}
	long := make([]byte, MaxBatchIDBytes+1)
	if _, err := s.Write(context.Background(), Batch{Ops: []wal.Op{set("a", "b")}, ID: long}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long id: %v", err)
	}
	mustVerify(t, s)
}

// Retries racing the first attempt (same ID, concurrently, so several land
// in one commit group) apply exactly once.
func TestBatchIDConcurrentRetries(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	for round := range 20 {
		id := []byte{byte(round)}
		before := s.AppliedIndex()
		var wg sync.WaitGroup
		var applied, dups atomic.Int32
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.Write(context.Background(), Batch{Ops: []wal.Op{setb("c", []byte{byte(round)})}, ID: id})
				switch {
				case err != nil:
					t.Error(err)
				case r.Duplicate:
					dups.Add(1)
				case r.Changed:
					applied.Add(1)
				}
			}()
		}
		wg.Wait()
		if applied.Load() != 1 || dups.Load() != 7 || s.AppliedIndex() != before+1 {
			t.Fatalf("round %d: %d applied, %d duplicates, index %d → %d", round, applied.Load(), dups.Load(), before, s.AppliedIndex())
		}
	}
}

func TestBatchIDsExpire(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := openTest(t, Options{IdempotencyWindow: time.Minute, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	for i := range 50 {
		if _, err := writeID(t, s, string(rune('A'+i)), nil, set("k", string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if n := countPrefix(t, s, prefixBatchID); n != 50 {
		t.Fatalf("%d outcomes recorded, want 50", n)
	}
	now.Add(int64(2 * time.Minute))
	// Expired: the same ID applies again.
	if r, _ := writeID(t, s, "A", nil, set("k", "again")); r.Duplicate || !r.Changed {
		t.Fatalf("expired id: %+v", r)
	}
	// Expiry runs at most once a second of real time.
	time.Sleep(1100 * time.Millisecond)
	mustWrite(t, s, set("tick", "1"))
	if n, m := countPrefix(t, s, prefixBatchID), countPrefix(t, s, prefixBatchTime); n != 1 || m != 1 {
		t.Fatalf("after expiry: %d outcomes, %d time records, want 1 each (the new A)", n, m)
	}
	if r, _ := writeID(t, s, "A", nil, set("k", "third")); !r.Duplicate {
		t.Fatalf("the new outcome of A was lost: %+v", r)
	}
	mustVerify(t, s)
}

// A batch outcome record that does not decode (a bad disk block) fails the
// write retrying that ID, counted as an integrity error (whether it was
// applied is unknown, so it is not applied again), and nothing else: it
// used to fail the whole commit group, the writes of other clients too.
func TestBatchIDCorruptOutcomeFailsOnlyItsRetry(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{BatchWindow: 300 * time.Millisecond, Logger: quietLogger()})
	first, err := writeID(t, s, "x", nil, set("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	rawSet(t, s, batchIDKey([]byte("x")), []byte("not an outcome"))
	before := integrityErrors(s, "batch_outcome")
	res, errs := tryInOneGroup(s,
		Batch{Ops: []wal.Op{set("a", "2")}, ID: []byte("x")},
		Batch{Ops: []wal.Op{set("b", "1")}})
	if !errors.Is(errs[0], ErrCorrupt) {
		t.Fatalf("retry of the ID with the corrupt outcome: %+v %v, want a corrupt error", res[0], errs[0])
	}
	if errs[1] != nil || !res[1].Changed {
		t.Fatalf("another write in the same group: %+v %v", res[1], errs[1])
	}
	if v, idx, _ := get(t, s, "a"); v != "1" || idx != first.Index {
		t.Fatalf("a = %q at %d: the retry was applied", v, idx)
	}
	if n := integrityErrors(s, "batch_outcome"); n != before+1 {
		t.Fatalf("integrity errors %v → %v, want one more", before, n)
	}
}

// Verify checks the batch outcomes: each decodes and has its time record
// (without which it never expires). It used to pass a store whose
// outcome of a batch ID was damaged, which the write path then refused.
func TestVerifyReportsBadBatchOutcomes(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	for _, id := range []string{"x", "y", "z"} {
		if _, err := writeID(t, s, id, nil, set("k", id)); err != nil {
			t.Fatal(err)
		}
	}
	mustVerify(t, s)
	rawSet(t, s, batchIDKey([]byte("x")), []byte("not an outcome"))
	o, err := decodeBatchOutcome(rawGet(t, s, batchIDKey([]byte("y"))))
	if err != nil {
		t.Fatal(err)
	}
	rawDelete(t, s, batchTimeKey(o.time, []byte("y")))
	r, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if r.ProblemCount != 2 || findProblem(r, ProblemBatchID, []byte("x")) == nil || findProblem(r, ProblemBatchID, []byte("y")) == nil {
		t.Fatalf("verify found %d problems, want the damaged outcome of x and the missing time record of y:\n%s", r.ProblemCount, problemList(r))
	}
}
