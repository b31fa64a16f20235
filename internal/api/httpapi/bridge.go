package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// The two ends of `qs bridge qs` on the bridged root (docs/protocol.md,
// "Bridged roots"): GET /v1/{db}/bridge names the database and the head of
// its log, where the bridge resumes; POST /v1/{db}/bridge appends entries
// of the source's log verbatim.

// bridgeHead serves GET /v1/{db}/bridge: {"db_id", "index", "hash",
// "bridged"} of any database.
func (h *handler) bridgeHead(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if r.URL.RawQuery != "" {
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			return h.fail(w, r, d, err)
		}
	}
	hd, err := d.Store.Head()
	if err != nil {
		return h.fail(w, r, d, err)
	}
	return h.writeBridgeHead(w, d, hd)
}

func (h *handler) writeBridgeHead(w http.ResponseWriter, d *service.Database, hd store.Head) int {
	body, err := json.Marshal(map[string]any{
		"db_id":   d.Store.DBID().String(),
		"index":   hd.Index,
		"hash":    hex.EncodeToString(hd.Hash[:]),
		"bridged": d.Bridge != nil,
	})
	if err != nil {
		return h.m.writeError(w, codeInternal, err, nil)
	}
	body = append(body, '\n')
	hdr := w.Header()
	hdr["Content-Type"] = jsonContentType
	hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	hdr["Qs-Applied-Index"] = []string{strconv.FormatUint(hd.Index, 10)}
	w.Write(body)
	return http.StatusOK
}

// bridgeAppend serves POST /v1/{db}/bridge: the body is one replication
// Entries message (the frame the replication protocol sends, checksum
// included). The entries must follow the database's log: the first one at
// the applied index + 1, chained from its hash; they are applied exactly
// as a replica applies a stream, in one durable commit. It answers the new
// head, as GET does. Entries that do not follow are refused whole with 409
// condition_failed and the applied index, and nothing is written.
func (h *handler) bridgeAppend(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if r.URL.RawQuery != "" {
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			return h.fail(w, r, d, err)
		}
	}
	if d.Bridge == nil {
		return h.fail(w, r, d, errorf(codeBadRequest, "qs: database %s is not bridged: only a root started with bridged = true (qs serve --bridged DBID) takes entries from a bridge", d.Name))
	}
	p, err := authenticate(d, r)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	m, err := repl.ReadMessage(http.MaxBytesReader(w, r.Body, repl.MaxPayload+16))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return h.fail(w, r, d, errorf(codeTooLarge, "qs: bridge body exceeds %d bytes", repl.MaxPayload+16))
		}
		return h.fail(w, r, d, errorf(codeBadRequest, "qs: bridge body is not one replication entries message: %v", err))
	}
	em, ok := m.(*repl.Entries)
	if !ok {
		return h.fail(w, r, d, errorf(codeBadRequest, "qs: bridge body holds a %s message, want entries", m.Type()))
	}
	if p != nil {
		for i := range em.Entries {
			// The bridge writes every key the source wrote: the producer
			// must be allowed all of them.
			if err := authorize(d, p, em.Entries[i].Ops); err != nil {
				return h.fail(w, r, d, err)
			}
		}
	}
	if err := d.Bridge(r.Context(), em.Entries); err != nil {
		if errors.Is(err, store.ErrNotContiguous) {
			applied := d.Store.AppliedIndex()
			return h.m.writeError(w, codeConditionFailed, fmt.Errorf("qs: bridged entries %d..%d do not follow this root's log at %d: %w",
				first(em.Entries), em.Entries[len(em.Entries)-1].Index, applied, err), &applied)
		}
		return h.fail(w, r, d, err)
	}
	hd, err := d.Store.Head()
	if err != nil {
		return h.fail(w, r, d, err)
	}
	return h.writeBridgeHead(w, d, hd)
}

func first(es []wal.Entry) uint64 { return es[0].Index }
