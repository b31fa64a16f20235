package store

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

func setx(k, v string, expires int64) wal.Op {
	return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(v), Expires: expires}
}

func dueKeys(t *testing.T, s *Store, at int64) []string {
	t.Helper()
	due, _, err := s.DueExpiries(at, 100)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range due {
		keys = append(keys, string(e.Key))
	}
	return keys
}

// TestExpiryBatchPolicy: the policy deletes the keys whose expiry has come
// by the given log time, earliest first, at most maxOps, each on the
// condition that the key still holds the version that gave it.
func TestExpiryBatchPolicy(t *testing.T) {
	t.Parallel()
	due := []Expiry{{Key: []byte("a"), Index: 3, Expires: 10}, {Key: []byte("b"), Index: 5, Expires: 20}, {Key: []byte("c"), Index: 9, Expires: 30}}
	cases := []struct {
		now    int64
		maxOps int
		want   []string
	}{
		{now: 9, maxOps: 10, want: nil},
		{now: 10, maxOps: 10, want: []string{"a"}},
		{now: 25, maxOps: 10, want: []string{"a", "b"}},
		{now: 99, maxOps: 2, want: []string{"a", "b"}},
		{now: 99, maxOps: 10, want: []string{"a", "b", "c"}},
	}
	for _, c := range cases {
		b := ExpiryBatch(due, c.now, c.maxOps)
		var got []string
		for i, op := range b.Ops {
			got = append(got, string(op.Key))
			if op.Type != wal.OpDelete || string(b.Conds[i].Key) != string(op.Key) || b.Conds[i].Index != due[i].Index {
				t.Fatalf("now %d: op %d is %+v under %+v", c.now, i, op, b.Conds[i])
			}
		}
		if len(b.Conds) != len(b.Ops) || !reflect.DeepEqual(got, c.want) {
			t.Errorf("now %d max %d: deletes %v, want %v", c.now, c.maxOps, got, c.want)
		}
	}
}

// TestExpiryIndexFollowsWrites: the expiry index lists every key with an
// expiry, at its latest one; it survives a restart, a replica keeps the
// same one, and the deletions the policy writes apply everywhere at the
// same index. A key written again since it was listed is not deleted.
func TestExpiryIndexFollowsWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := openTest(t, Options{Dir: dir})
	mustWrite(t, root, setx("a", "1", 100), setx("b", "2", 200), set("c", "3"), setx("d", "4", 150))
	mustWrite(t, root, setx("d", "4", 0), setx("e", "5", 120))
	mustWrite(t, root, setx("e", "5", 300)) // a new expiry, same value: a write
	if got := lookupItems(t, root, "a", "e"); got["a"].Expires != 100 || got["e"].Expires != 300 {
		t.Fatalf("expiries read back: %+v", got)
	}
	if got := dueKeys(t, root, 1<<62); !reflect.DeepEqual(got, []string{"a", "b", "e"}) {
		t.Fatalf("all keys with an expiry: %v", got)
	}
	due, _, err := root.DueExpiries(150, 100)
	if err != nil || len(due) != 1 || string(due[0].Key) != "a" {
		t.Fatalf("due at 150: %+v %v", due, err)
	}
	if w, err := root.Write(context.Background(), ExpiryBatch(due, 150, 100)); err != nil || !w.Changed {
		t.Fatalf("expiring a: %+v %v", w, err)
	}
	if _, found := lookupItems(t, root, "a")["a"]; found {
		t.Fatal("a was not deleted")
	}

	// A key rewritten after it was listed keeps its new version.
	due, _, _ = root.DueExpiries(250, 100)
	mustWrite(t, root, setx("b", "new", 0))
	if _, err := root.Write(context.Background(), ExpiryBatch(due, 250, 100)); !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("expiring a rewritten key: %v", err)
	}
	if got := lookupItems(t, root, "b")["b"]; string(got.Value) != "new" || got.Expires != 0 {
		t.Fatalf("b after the refused expiry: %+v", got)
	}
	mustVerify(t, root)

	replica := openTest(t, Options{Name: dbName(t), DBID: root.DBID()})
	replicate(t, root, replica, 2)
	for _, s := range []*Store{root, replica} {
		if got := dueKeys(t, s, 1<<62); !reflect.DeepEqual(got, []string{"e"}) {
			t.Fatalf("keys with an expiry: %v", got)
		}
	}
	mustVerify(t, replica)

	root.Close()
	root = openTest(t, Options{Dir: dir})
	due, at, err := root.DueExpiries(300, 100)
	if err != nil || len(due) != 1 || string(due[0].Key) != "e" || at != root.AppliedIndex() {
		t.Fatalf("after a restart: %+v at %d, %v", due, at, err)
	}
	w, err := root.Write(context.Background(), ExpiryBatch(due, 300, 100))
	if err != nil || !w.Changed {
		t.Fatalf("expiring e: %+v %v", w, err)
	}
	replicate(t, root, replica, 10)
	for _, s := range []*Store{root, replica} {
		if got := dueKeys(t, s, 1<<62); got != nil {
			t.Fatalf("keys with an expiry after they expired: %v", got)
		}
		if got := lookupItems(t, s, "a", "b", "c", "d", "e"); len(got) != 3 {
			t.Fatalf("keys left: %v", got)
		}
	}
	sameState(t, root, replica)
}

// TestExpiryRefusals: a negative expiry, or one on a delete, is refused
// and changes nothing.
func TestExpiryRefusals(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	mustWrite(t, s, set("k", "v"))
	for _, op := range []wal.Op{setx("k", "w", -1), {Type: wal.OpDelete, Key: []byte("k"), Expires: 5}} {
		if _, err := s.Write(context.Background(), Batch{Ops: []wal.Op{op}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v", op, err)
		}
	}
	if got := lookupItems(t, s, "k")["k"]; string(got.Value) != "v" || s.AppliedIndex() != 1 {
		t.Fatalf("after refusals: %+v at %d", got, s.AppliedIndex())
	}
}
