package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/statuspage"
)

// handler serves the API for the databases of a service.Catalog.
type handler struct {
	cfg Config
	cat service.Catalog
	log *slog.Logger
	mux *http.ServeMux
	m   *Metrics
	// requests holds the children of qs_http_requests_total that
	// serveDB counted.
	requests requestCounters
}

// dbHandler serves one request for a known database and returns the HTTP
// status it answered with (for metrics). It writes the whole answer,
// success or JSON error.
type dbHandler func(w http.ResponseWriter, r *http.Request, d *service.Database) int

// New returns the handler of the HTTP API for the databases of cat, with
// GET /metrics and GET /healthz mounted too. Zero fields of cfg take their
// defaults; New panics if cfg is invalid after that (validate configuration
// when it is loaded, with Config.Validate). A nil log discards log records.
func New(cfg Config, cat service.Catalog, log *slog.Logger) http.Handler {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	h := &handler{cfg: cfg, cat: cat, log: log, mux: http.NewServeMux(), m: cfg.Metrics}
	h.requests.vec = cfg.Metrics.requests
	m := h.mux
	m.Handle("GET /v1/{db}/keys/{key...}", h.route(routeGet, h.get))
	m.Handle("PUT /v1/{db}/keys/{key...}", h.route(routePut, h.put))
	m.Handle("DELETE /v1/{db}/keys/{key...}", h.route(routeDelete, h.delete))
	m.Handle("/v1/{db}/keys/{key...}", h.methodNotAllowed("GET, HEAD, PUT, DELETE"))
	m.Handle("GET /v1/{db}/keys", h.route(routeScan, h.scan))
	m.Handle("/v1/{db}/keys", h.methodNotAllowed("GET, HEAD"))
	m.Handle("POST /v1/{db}/batch", h.route(routeBatch, h.batch))
	m.Handle("/v1/{db}/batch", h.methodNotAllowed("POST"))
	m.Handle("POST /v1/{db}/mget", h.route(routeMget, h.mget))
	m.Handle("/v1/{db}/mget", h.methodNotAllowed("POST"))
	m.Handle("GET /v1/{db}/status", h.route(routeStatus, h.status))
	m.Handle("/v1/{db}/status", h.methodNotAllowed("GET, HEAD"))
	m.Handle("GET /v1/{db}/tree", h.route(routeTree, h.tree))
	m.Handle("/v1/{db}/tree", h.methodNotAllowed("GET, HEAD"))
	m.HandleFunc("GET /v1/node", h.node)
	m.Handle("/v1/node", h.methodNotAllowed("GET, HEAD"))
	m.Handle("GET /{$}", statuspage.Handler())
	m.Handle("GET /v1/{db}/usage", h.route(routeUsage, h.usage))
	m.Handle("/v1/{db}/usage", h.methodNotAllowed("GET, HEAD"))
	m.Handle("POST /v1/{db}/raft/members", h.route(routeMembers, h.addMember))
	m.Handle("DELETE /v1/{db}/raft/members/{id}", h.route(routeMembers, h.removeMember))
	m.Handle("GET /v1/{db}/digest", h.route(routeDigest, h.digest))
	m.Handle("/v1/{db}/digest", h.methodNotAllowed("GET, HEAD"))
	m.Handle("GET /v1/{db}/bridge", h.route(routeBridge, h.bridgeHead))
	m.Handle("POST /v1/{db}/bridge", h.route(routeBridge, h.bridgeAppend))
	m.Handle("/v1/{db}/bridge", h.methodNotAllowed("GET, HEAD, POST"))
	m.HandleFunc("GET /v1/{db}/watch", h.watchRoute)
	m.Handle("/v1/{db}/watch", h.methodNotAllowed("GET, HEAD"))
	m.HandleFunc("GET /v1/members", h.overlayMembers)
	m.Handle("/v1/members", h.methodNotAllowed("GET, HEAD"))
	m.Handle("GET /metrics", metrics.Handler())
	m.Handle("/metrics", h.methodNotAllowed("GET, HEAD"))
	m.HandleFunc("GET /healthz", h.healthz)
	m.Handle("/healthz", h.methodNotAllowed("GET, HEAD"))
	m.HandleFunc("/", h.notFound)
	return h
}

// ServeHTTP refuses paths that ServeMux would redirect to their cleaned
// form: "/v1/db/keys/a//b" would otherwise become a PUT of key "a/b".
// Keys holding such sequences must escape them (docs/protocol.md, "Keys and
// values").
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.refuseUnclean(w, r) {
		return
	}
	if db, key, ok := keyRequest(r); ok {
		// The most frequent request skips the router and the connection's
		// body deadline (it has no body); serveDB counts, bounds and
		// recovers it as it does every routed request.
		h.serveDB(w, r, routeGet, db, func(w http.ResponseWriter, r *http.Request, d *service.Database) int {
			return h.getKey(w, r, d, key)
		})
		return
	}
	h.serveRouted(w, r)
}

// refuseUnclean answers 400 to a path with empty, "." or ".." segments
// and reports whether it did.
func (h *handler) refuseUnclean(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodConnect || isCleanPath(r.URL.EscapedPath()) {
		return false
	}
	h.m.countOther(codeBadRequest.status())
	h.m.writeError(w, codeBadRequest, errors.New(`qs: path has empty, "." or ".." segments; escape '/' in keys as %2F and '.' as %2E`), nil)
	return true
}

// serveRouted serves a request through the router, within the deadlines
// of its connection.
func (h *handler) serveRouted(w http.ResponseWriter, r *http.Request) {
	defer h.bound(w, r)()
	h.mux.ServeHTTP(w, r)
}

// isCleanPath reports whether p has no empty, "." or ".." segments after
// its first byte (a trailing slash is fine), i.e. whether ServeMux would
// leave it alone.
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		rest := p[i+1:]
		switch {
		case rest == "":
		case rest[0] == '/':
			return false
		case rest[0] == '.':
			if len(rest) == 1 || rest[1] == '/' {
				return false
			}
			if rest[1] == '.' && (len(rest) == 2 || rest[2] == '/') {
				return false
			}
		}
	}
	return true
}

// route wraps a database handler: it finds the database, recovers panics
// into JSON errors and records metrics under the route's name.
func (h *handler) route(rt route, fn dbHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.serveDB(w, r, rt, r.PathValue("db"), fn)
	})
}

// serveDB serves one request of route rt for the database named name:
// each write of the answer gets a fresh write deadline, a panic becomes a
// JSON error, and the request is counted and timed under the route.
func (h *handler) serveDB(w http.ResponseWriter, r *http.Request, rt route, name string, fn dbHandler) {
	start := time.Now()
	var status int
	if d, ok := h.cat.Database(name); ok {
		bw := &boundedWriter{ResponseWriter: w, conn: connDeadlines(w), h: h}
		status = h.call(fn, bw, r, d, rt)
	} else {
		status = h.m.writeError(w, codeUnknownDatabase, fmt.Errorf("qs: unknown database %q", name), nil)
		name = "" // a label per unknown name would let clients grow the metrics without bound
	}
	h.requests.counter(name, rt, status).Inc()
	h.m.secondsByRoute[rt].Observe(time.Since(start).Seconds())
}

func (h *handler) call(fn dbHandler, w http.ResponseWriter, r *http.Request, d *service.Database, rt route) (status int) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.Error("panic serving request", "db", d.Name, "route", rt.String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			status = h.m.writeError(w, codeInternal, errors.New("qs: internal error"), nil)
		}
	}()
	return fn(w, r, d)
}

// fail answers with the JSON error for err and returns the status. Server
// errors are logged; client errors are only counted.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, d *service.Database, err error) int {
	code := classify(err)
	if code.status() >= 500 {
		lvl := slog.LevelWarn
		if code == codeIntegrity || code == codeInternal {
			lvl = slog.LevelError
		}
		h.log.Log(r.Context(), lvl, "request failed", "db", d.Name, "method", r.Method, "path", r.URL.Path, "code", code.String(), "err", err)
	}
	return h.m.writeError(w, code, err, nil)
}

func (h *handler) methodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		status := h.m.writeError(w, codeMethodNotAllowed, fmt.Errorf("qs: method %s not allowed; allowed: %s", r.Method, allow), nil)
		h.m.countOther(status)
	})
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	status := h.m.writeError(w, codeNotFound, fmt.Errorf("qs: no such endpoint: %s", r.URL.Path), nil)
	h.m.countOther(status)
}

// healthz answers "ok", or 503 with the reasons the catalog gives (see
// HealthReporter).
func (h *handler) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if hr, ok := h.cat.(HealthReporter); ok {
		if why := hr.Unhealthy(); len(why) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(strings.Join(why, "\n") + "\n"))
			return
		}
	}
	w.Write([]byte("ok"))
}

// Header values shared by all answers. net/http only reads them.
var (
	jsonContentType  = []string{"application/json"}
	octetContentType = []string{"application/octet-stream"}
)

// parseQuery parses a query string, refusing parameters not in allowed and
// parameters given twice, so that a misspelt parameter is an error rather
// than silently ignored.
func parseQuery(raw string, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, errorf(codeBadRequest, "qs: bad query string: %v", err)
	}
next:
	for name, vals := range q {
		for _, a := range allowed {
			if name == a {
				if len(vals) > 1 {
					return nil, errorf(codeBadRequest, "qs: query parameter %q given %d times", name, len(vals))
				}
				continue next
			}
		}
		return nil, errorf(codeBadRequest, "qs: unknown query parameter %q (allowed here: %v)", name, allowed)
	}
	return q, nil
}
