package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// openStore opens a real store in a temporary directory; o.Dir, when set,
// is reused.
func openStore(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 1
	}
	if o.BallastBytes == 0 {
		o.BallastBytes = -1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// env is one database "db" served over a loopback test server.
type env struct {
	t   testing.TB
	st  *store.Store
	db  *service.Database
	srv *httptest.Server
	h   http.Handler
	m   *Metrics // the handler's
	// writeErr is what db.Refuse returns; tests switch it between requests.
	writeErr atomic.Pointer[error]
}

func newEnv(t testing.TB, cfg Config, o store.Options) *env {
	t.Helper()
	st := openStore(t, o)
	e := &env{t: t, st: st}
	e.db = &service.Database{Name: "db", Node: "node-a", Store: st, Refuse: func() error {
		if p := e.writeErr.Load(); p != nil {
			return *p
		}
		return nil
	}}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	e.m = cfg.Metrics
	e.h = New(cfg, service.Databases{"db": e.db}, nil)
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	return e
}

// setWriteErr makes Refuse return err (nil: writable).
func (e *env) setWriteErr(err error) {
	if err == nil {
		e.writeErr.Store(nil)
		return
	}
	e.writeErr.Store(&err)
}

// resp is a whole answer.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path string, body []byte) resp {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.send(req)
}

func (e *env) send(req *http.Request) resp {
	e.t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// keyPath is the URL path of key in database "db", escaped the way the
// package comment tells clients to.
func keyPath(key string) string {
	return "/v1/db/keys/" + escapeKey(key)
}

func escapeKey(key string) string {
	return strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
}

func (e *env) put(key, value string) writeReply {
	e.t.Helper()
	r := e.do("PUT", keyPath(key), []byte(value))
	return mustWriteOK(e.t, r)
}

type writeReply struct {
	Index   uint64 `json:"index"`
	Changed bool   `json:"changed"`
}

func mustWriteOK(t testing.TB, r resp) writeReply {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("write: status %d: %s", r.status, r.body)
	}
	var w writeReply
	mustDecode(t, r.body, &w)
	return w
}

func mustDecode(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
}

type errReply struct {
	Error struct {
		Code         string   `json:"code"`
		Message      string   `json:"message"`
		AppliedIndex *uint64  `json:"applied_index"`
		RootHTTP     []string `json:"root_http"`
	} `json:"error"`
}

// mustError checks that r is a JSON error with status and code, and
// returns it.
func mustError(t testing.TB, r resp, status int, code string) errReply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s): %s", r.status, status, code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q, want application/json", ct)
	}
	var e errReply
	mustDecode(t, r.body, &e)
	if e.Error.Code != code {
		t.Fatalf("error code %q, want %q: %s", e.Error.Code, code, r.body)
	}
	if e.Error.Message == "" {
		t.Fatalf("error without message: %s", r.body)
	}
	return e
}

type scanReply struct {
	Index uint64     `json:"index"`
	Items []scanItem `json:"items"`
	Next  *string    `json:"next"`
}

type scanItem struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
	Index uint64 `json:"index"`
}

type mgetReply struct {
	Index  uint64            `json:"index"`
	Values map[string][]byte `json:"values"`
}

func jsonBody(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func containsStr(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

func setOp(k, v string) wal.Op { return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(v)} }
