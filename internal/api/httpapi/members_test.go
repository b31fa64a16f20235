package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
)

// fakeMembers records membership changes.
type fakeMembers struct {
	added   map[uint64]string
	removed []uint64
}

func (f *fakeMembers) AddMember(_ context.Context, id uint64, addr string) error {
	if f.added == nil {
		f.added = map[uint64]string{}
	}
	f.added[id] = addr
	return nil
}

func (f *fakeMembers) RemoveMember(_ context.Context, id uint64) error {
	if id == 99 {
		return store.ErrUnavailable
	}
	f.removed = append(f.removed, id)
	return nil
}

// Membership endpoints: refused on a database that is not an HA root,
// refused to a producer that may not write the whole keyspace, validated,
// and passed to the member otherwise.
func TestMembersEndpoints(t *testing.T) {
	e := newGateEnv(t, "members")
	if r := e.doAs(e.admin, http.MethodPost, "/v1/db/raft/members", []byte(`{"id":4,"addr":"h:1"}`)); r.status != http.StatusBadRequest {
		t.Fatalf("not an HA root: %d %s", r.status, r.body)
	}
	f := &fakeMembers{}
	e.db.Members = f
	e.db.Status = func() map[string]any { return map[string]any{"members": map[string]string{"1": "h:0"}} }
	mustGateError(t, e.doAs("", http.MethodPost, "/v1/db/raft/members", []byte(`{"id":4,"addr":"h:1"}`)), http.StatusUnauthorized, "unauthenticated")
	mustGateError(t, e.doAs(e.app, http.MethodPost, "/v1/db/raft/members", []byte(`{"id":4,"addr":"h:1"}`)), http.StatusForbidden, "forbidden")
	mustGateError(t, e.doAs(e.app, http.MethodDelete, "/v1/db/raft/members/3", nil), http.StatusForbidden, "forbidden")
	for _, body := range []string{`{"id":0,"addr":"h:1"}`, `{"id":4}`} {
		if r := e.doAs(e.admin, http.MethodPost, "/v1/db/raft/members", []byte(body)); r.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	if r := e.doAs(e.admin, http.MethodPost, "/v1/db/raft/members", []byte(`{"id":4,`)); r.status != http.StatusBadRequest {
		t.Fatalf("bad json: %d", r.status)
	}
	if r := e.doAs(e.admin, http.MethodDelete, "/v1/db/raft/members/x", nil); r.status != http.StatusBadRequest {
		t.Fatalf("bad id: %d", r.status)
	}
	if r := e.doAs(e.admin, http.MethodPost, "/v1/db/raft/members", []byte(`{"id":4,"addr":"h:1"}`)); r.status != http.StatusOK || f.added[4] != "h:1" {
		t.Fatalf("add: %d %s %v", r.status, r.body, f.added)
	}
	if r := e.doAs(e.admin, http.MethodDelete, "/v1/db/raft/members/3", nil); r.status != http.StatusOK || len(f.removed) != 1 || f.removed[0] != 3 {
		t.Fatalf("remove: %d %s %v", r.status, r.body, f.removed)
	}
	mustGateError(t, e.doAs(e.admin, http.MethodDelete, "/v1/db/raft/members/99", nil), http.StatusServiceUnavailable, "unavailable")
}
