package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
)

// status serves GET /v1/{db}/status: the store's position and counters,
// with the fields of service.Database.RoleStatus added. Its "role" stays; its
// other fields never replace the store's.
func (h *handler) status(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if r.URL.RawQuery != "" {
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			return h.fail(w, r, d, err)
		}
	}
	out, err := statusOf(d)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	applied, _ := out["applied_index"].(uint64)
	body, err := json.Marshal(out)
	if err != nil { // a Status func returned something JSON cannot hold
		return h.fail(w, r, d, err)
	}
	body = append(body, '\n')
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	hd["Qs-Applied-Index"] = []string{strconv.FormatUint(applied, 10)}
	w.Write(body)
	return http.StatusOK
}

// statusOf is the document of GET /v1/{db}/status.
func statusOf(d *service.Database) (map[string]any, error) {
	s := d.Store
	st, err := s.Stats()
	if err != nil {
		return nil, err
	}
	out := d.RoleStatus()
	applied := s.AppliedIndex()
	var appliedTime any // null until the first entry
	if t := s.AppliedTime(); !t.IsZero() {
		appliedTime = t.UTC().Format(time.RFC3339Nano)
	}
	for k, v := range map[string]any{
		"db":              d.Name,
		"node":            d.Node,
		"db_id":           s.DBID().String(),
		"applied_index":   applied,
		"applied_time":    appliedTime,
		"keys":            st.Keys,
		"key_bytes":       st.KeyBytes,
		"value_bytes":     st.ValueBytes,
		"log_first_index": st.LogFirst,
		"log_bytes":       st.LogBytes,
		"disk_bytes":      s.DiskBytes(),
		"disk_full":       s.DiskFull(),
	} {
		out[k] = v
	}
	return out, nil
}
