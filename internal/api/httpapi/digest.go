package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/service"
)

// digestSlot lets one digest run at a time in the process: each reads the
// whole database, and a second one would only halve the speed of both.
var digestSlot = make(chan struct{}, 1)

// digest serves GET /v1/{db}/digest[?min_index=N&timeout=D]: a SHA-256 over
// every key, value and write index of the database at one applied index
// (store.Digest). Two nodes of a database whose digests match serve the
// same data. Heartbeats change no data, so nodes at different indexes after
// the same last write have the same digest. It reads every value (checking
// every CRC): an operator's tool, not a request path.
func (h *handler) digest(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r.URL.RawQuery, "min_index", "timeout")
		if err != nil {
			return h.fail(w, r, d, err)
		}
		if status := h.awaitParams(w, r, d, q); status != 0 {
			return status
		}
	}
	select {
	case digestSlot <- struct{}{}:
		defer func() { <-digestSlot }()
	case <-r.Context().Done():
		return h.fail(w, r, d, r.Context().Err())
	}
	dg, err := d.Store.Digest()
	if err != nil {
		return h.fail(w, r, d, err)
	}
	body, err := json.Marshal(map[string]any{
		"index":  dg.Index,
		"keys":   dg.Keys,
		"sha256": hex.EncodeToString(dg.Hash[:]),
	})
	if err != nil {
		return h.fail(w, r, d, err)
	}
	body = append(body, '\n')
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	hd["Qs-Applied-Index"] = []string{strconv.FormatUint(dg.Index, 10)}
	w.Write(body)
	return http.StatusOK
}
