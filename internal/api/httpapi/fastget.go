package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The single-key GET is most of what clients ask, so it skips the router:
// keyRequest recognizes it from the path alone, the way ServeMux would match
// "GET /v1/{db}/keys/{key...}", and ServeHTTP hands it to serveDB like
// every routed request (write deadlines, panics, metrics). Anything keyRequest
// is not sure of goes through the router, whose answer is the reference.

// keyRequest returns the database and key of a plain GET
// /v1/{db}/keys/{key...}: method GET, no body, a database name of one
// segment and a key that is not empty, each unescaped as ServeMux does it
// (segment by segment; an invalid escape is kept as sent). ok is false for
// every other request.
func keyRequest(r *http.Request) (db, key string, ok bool) {
	if r.Method != http.MethodGet || r.Body != http.NoBody {
		return "", "", false
	}
	p, escaped := r.URL.Path, false
	if r.URL.RawPath != "" {
		p, escaped = r.URL.EscapedPath(), true
	}
	rest, ok := strings.CutPrefix(p, "/v1/")
	if !ok {
		return "", "", false
	}
	db, key, ok = strings.Cut(rest, "/keys/")
	if !ok || db == "" || key == "" || strings.IndexByte(db, '/') >= 0 {
		return "", "", false
	}
	if escaped {
		db, key = pathUnescape(db), pathUnescape(key)
	}
	return db, key, true
}

// pathUnescape unescapes one part of a path the way ServeMux does for a
// wildcard: an invalid escape leaves the part as it is.
func pathUnescape(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// requestCounters keeps the children of qs_http_requests_total that were
// counted, so that counting a request costs a map read rather than hashing
// its labels. Keys are bounded: database names come from configuration
// (unknown ones are counted as ""), routes and statuses are few.
type requestCounters struct {
	vec *prometheus.CounterVec // qs_http_requests_total
	m   sync.Map               // requestLabels → prometheus.Counter
}

type requestLabels struct {
	db     string
	rt     route
	status int
}

// counter returns the child of qs_http_requests_total for db, rt and
// status.
func (c *requestCounters) counter(db string, rt route, status int) prometheus.Counter {
	l := requestLabels{db, rt, status}
	if v, ok := c.m.Load(l); ok {
		return v.(prometheus.Counter)
	}
	ctr := c.vec.WithLabelValues(db, rt.String(), statusLabel(status))
	c.m.Store(l, ctr)
	return ctr
}
