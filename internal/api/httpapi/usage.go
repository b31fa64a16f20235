package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/service"
)

// usage serves GET /v1/{db}/usage[?producer=NAME]: the keys and bytes
// stored under each producer's prefixes (gateway.Gateway.Usage), read at
// one index. It costs a pass over the value records under every prefix
// reported: an operator's tool, not a request for every page view.
func (h *handler) usage(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	var producer string
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r.URL.RawQuery, "producer", "unread", "window", "limit")
		if err != nil {
			return h.fail(w, r, d, err)
		}
		producer = q.Get("producer")
		if q.Has("unread") || q.Has("window") || q.Has("limit") {
			return h.unread(w, r, d, q)
		}
	}
	rep, err := d.Gate.Usage(d.Store, d.Name, producer)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	body = append(body, '\n')
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	hd["Qs-Applied-Index"] = []string{strconv.FormatUint(rep.Index, 10)}
	w.Write(body)
	return http.StatusOK
}
