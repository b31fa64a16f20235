package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Membership of a replicated root (docs/operations.md, "Running an HA
// root"). With the producer gateway on, only a producer allowed the whole
// keyspace (prefix "") may change it.
//
//	POST   /v1/{db}/raft/members        {"id":4,"addr":"host:port"}  add a member
//	DELETE /v1/{db}/raft/members/{id}                                remove a member
//
// Both answer {"members":{...}} from the database's status once the change
// is applied on this node.

type memberRequest struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
}

func (h *handler) addMember(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if err := h.checkMembers(r, d); err != nil {
		return h.fail(w, r, d, err)
	}
	body, err := readBody(w, r, 4096)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	var req memberRequest
	if err := decodeStrict(body, &req); err != nil {
		return h.fail(w, r, d, err)
	}
	if req.ID == 0 || req.Addr == "" {
		return h.fail(w, r, d, errorf(codeBadRequest, `qs: member needs "id" (≥ 1) and "addr"`))
	}
	if err := d.Members.AddMember(r.Context(), req.ID, req.Addr); err != nil {
		return h.fail(w, r, d, err)
	}
	return h.members(w, d)
}

func (h *handler) removeMember(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if err := h.checkMembers(r, d); err != nil {
		return h.fail(w, r, d, err)
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return h.fail(w, r, d, errorf(codeBadRequest, "qs: member id %q is not a number ≥ 1", r.PathValue("id")))
	}
	if err := d.Members.RemoveMember(r.Context(), id); err != nil {
		return h.fail(w, r, d, err)
	}
	return h.members(w, d)
}

func (h *handler) checkMembers(r *http.Request, d *service.Database) error {
	if d.Members == nil {
		return errorf(codeBadRequest, "qs: database %s is not a replicated (raft) root", d.Name)
	}
	p, err := authenticate(d, r)
	if err != nil {
		return err
	}
	// The whole keyspace: an empty key has every allowed prefix only if
	// one of them is "".
	return authorize(d, p, []wal.Op{{Type: wal.OpDelete, Key: []byte{}}})
}

func (h *handler) members(w http.ResponseWriter, d *service.Database) int {
	out := map[string]any{}
	if d.Status != nil {
		out["members"] = d.Status()["members"]
	}
	body, _ := json.Marshal(out)
	w.Header()["Content-Type"] = jsonContentType
	w.Write(append(body, '\n'))
	return http.StatusOK
}

// overlayMembers serves GET /v1/members: the gossip overlay as this node
// sees it, with estimated round trips (docs/operations.md, "Reading the
// tree"). 404 when the node is not a member of an overlay.
func (h *handler) overlayMembers(w http.ResponseWriter, r *http.Request) {
	oc, ok := h.cat.(OverlayCatalog)
	var list any
	if ok {
		list, ok = oc.Members()
	}
	if !ok {
		status := h.m.writeError(w, codeNotFound, errors.New("qs: this node is not a member of a gossip overlay (start it with --gossip)"), nil)
		h.m.countOther(status)
		return
	}
	body, err := json.Marshal(list)
	if err != nil {
		status := h.m.writeError(w, codeInternal, err, nil)
		h.m.countOther(status)
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	w.Write(append(body, '\n'))
	h.m.countOther(http.StatusOK)
}
