package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func setBatch(key, value string) store.Batch {
	return store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(key), Value: []byte(value)}}}
}

// TestWriteWithoutProposeCommitsToStore: a database without Propose
// commits through its store.
func TestWriteWithoutProposeCommitsToStore(t *testing.T) {
	st := openStore(t)
	d := &Database{Name: "db", Store: st}
	r, err := d.Write(context.Background(), setBatch("k", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Index != 1 || !r.Changed || st.AppliedIndex() != 1 {
		t.Fatalf("write: %+v, store at %d", r, st.AppliedIndex())
	}
}

// TestWriteProposes: a database with Propose hands it every write, as
// given, and answers its outcome; the store is not written directly.
func TestWriteProposes(t *testing.T) {
	st := openStore(t)
	var got []store.Batch
	errQuorum := fmt.Errorf("%w: no leader", store.ErrUnavailable)
	d := &Database{Name: "db", Store: st, Propose: func(_ context.Context, b store.Batch) (store.WriteResult, error) {
		got = append(got, b)
		if len(got) == 2 {
			return store.WriteResult{}, errQuorum
		}
		return store.WriteResult{Index: 7, Changed: true}, nil
	}}
	r, err := d.Write(context.Background(), setBatch("a", "1"))
	if err != nil || r.Index != 7 || !r.Changed {
		t.Fatalf("proposed write: %+v %v", r, err)
	}
	if _, err := d.Write(context.Background(), setBatch("b", "2")); !errors.Is(err, errQuorum) {
		t.Fatalf("proposal's error not answered: %v", err)
	}
	if len(got) != 2 || string(got[0].Ops[0].Key) != "a" || string(got[1].Ops[0].Key) != "b" {
		t.Fatalf("proposed batches: %+v", got)
	}
	if st.AppliedIndex() != 0 {
		t.Fatalf("store written directly: applied index %d", st.AppliedIndex())
	}
}
