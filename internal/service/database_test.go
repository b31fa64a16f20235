package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// TestCanWrite: a node takes writes without Refuse or when it says nil;
// a refusal is always a store.ErrNotRoot unless it names another of the
// store's errors, and keeps what it said (the root's addresses).
func TestCanWrite(t *testing.T) {
	refuse := func(err error) *Database { return &Database{Refuse: func() error { return err }} }
	if err := (&Database{}).CanWrite(); err != nil {
		t.Fatalf("no Refuse: %v", err)
	}
	if err := refuse(nil).CanWrite(); err != nil {
		t.Fatalf("Refuse saying nil: %v", err)
	}

	plain := errors.New("replicates from upstream-1")
	err := refuse(plain).CanWrite()
	if !errors.Is(err, store.ErrNotRoot) || !errors.Is(err, plain) {
		t.Fatalf("plain refusal not a not-root refusal: %v", err)
	}

	nr := &store.NotRootError{Database: "db", Root: []string{"root-1:7380"}, Detail: "a replica"}
	err = refuse(nr).CanWrite()
	var got *store.NotRootError
	if !errors.Is(err, store.ErrNotRoot) || !errors.As(err, &got) || !slices.Equal(got.Root, nr.Root) {
		t.Fatalf("not-root refusal: %v", err)
	}

	for _, kind := range []error{store.ErrClosed, store.ErrUnavailable, store.ErrDiskFull, context.Canceled} {
		err = refuse(fmt.Errorf("database db: %w", kind)).CanWrite()
		if !errors.Is(err, kind) || errors.Is(err, store.ErrNotRoot) {
			t.Fatalf("refusal %v became %v", kind, err)
		}
	}
}

// TestRoleStatus: the role comes from Status when it names one, else
// from CanWrite; Status's other fields are kept, in a map of the
// caller's own.
func TestRoleStatus(t *testing.T) {
	refusing := func() error { return errors.New("a replica") }
	for _, c := range []struct {
		name       string
		refuse     func() error
		status     map[string]any
		wantStatus any
		wantRole   string
	}{
		{name: "root", wantStatus: "root", wantRole: "root"},
		{name: "refusing", refuse: refusing, wantStatus: "replica", wantRole: "replica"},
		{name: "status without role", refuse: refusing, status: map[string]any{"state": "streaming"}, wantStatus: "replica", wantRole: "replica"},
		{name: "status role", refuse: refusing, status: map[string]any{"role": "proxy", "state": "streaming"}, wantStatus: "proxy", wantRole: "proxy"},
		{name: "status role not a string", status: map[string]any{"role": 3}, wantStatus: 3, wantRole: "root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &Database{Refuse: c.refuse}
			if c.status != nil {
				d.Status = func() map[string]any { return c.status }
			}
			m := d.RoleStatus()
			if m["role"] != c.wantStatus {
				t.Fatalf("RoleStatus role %v, want %v", m["role"], c.wantStatus)
			}
			if c.status != nil && m["state"] != c.status["state"] {
				t.Fatalf("RoleStatus lost Status's fields: %v", m)
			}
			m["added"] = true
			if _, ok := c.status["added"]; ok {
				t.Fatal("RoleStatus returned Status's own map")
			}
			if r := d.Role(); r != c.wantRole {
				t.Fatalf("Role %q, want %q", r, c.wantRole)
			}
		})
	}
}
