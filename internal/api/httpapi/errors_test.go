package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		code errCode
	}{
		{store.ErrNotRoot, codeNotRoot},
		{store.ErrConditionFailed, codeConditionFailed},
		{store.ErrTooLarge, codeTooLarge},
		{store.ErrInvalid, codeBadRequest},
		{store.ErrDiskFull, codeDiskFull},
		{store.ErrWriteFailed, codeWriteFailed},
		{store.ErrCorrupt, codeIntegrity},
		{store.ErrClosed, codeUnavailable},
		{context.DeadlineExceeded, codeTimeout},
		{context.Canceled, codeCanceled},
		{&http.MaxBytesError{Limit: 1}, codeTooLarge},
		{errors.New("something else"), codeInternal},
		{store.ErrLogTruncated, codeInternal},
		{errorf(codeBadJSON, "x"), codeBadJSON},
		// Wrapped, and corruption wins over whatever else is wrapped.
		{fmt.Errorf("key %q: %w", "k", store.ErrCorrupt), codeIntegrity},
		{fmt.Errorf("%w: %w", store.ErrWriteFailed, store.ErrCorrupt), codeIntegrity},
		{fmt.Errorf("write: %w", fmt.Errorf("%w (the write may still commit)", context.Canceled)), codeCanceled},
	} {
		if got := classify(c.err); got != c.code {
			t.Errorf("classify(%v) = %s, want %s", c.err, got, c.code)
		}
	}
	for c := range numCodes {
		if c.String() == "" || c.status() < 400 {
			t.Errorf("code %d has no name or status", c)
		}
	}
}

func TestErrorBadRequests(t *testing.T) {
	e := newEnv(t, Config{MaxMgetKeys: 3}, store.Options{})
	e.put("k", "v")
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/nodb/keys/k", "", 404, "unknown_database"},
		{"PUT", "/v1/nodb/keys/k", "v", 404, "unknown_database"},
		{"DELETE", "/v1/nodb/keys/k", "", 404, "unknown_database"},
		{"POST", "/v1/nodb/batch", `{"ops":[]}`, 404, "unknown_database"},
		{"GET", "/v1/nodb/keys", "", 404, "unknown_database"},
		{"POST", "/v1/nodb/mget", `{"keys":[]}`, 404, "unknown_database"},
		{"GET", "/v1/nodb/status", "", 404, "unknown_database"},

		{"GET", "/v1/db/keys/", "", 400, "bad_request"},
		{"PUT", "/v1/db/keys/", "v", 400, "bad_request"},
		{"DELETE", "/v1/db/keys/", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?min_index=x", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?min_index=-1", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?min_index=1&timeout=forever", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?min_index=1&timeout=-1s", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?min_index=1&min_index=2", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?minindex=1", "", 400, "bad_request"},
		{"GET", "/v1/db/keys/k?a=%zz", "", 400, "bad_request"},
		{"PUT", "/v1/db/keys/k?if_index=abc", "v", 400, "bad_request"},
		{"PUT", "/v1/db/keys/k?if=1", "v", 400, "bad_request"},
		{"GET", "/v1/db/keys?limit=0", "", 400, "bad_request"},
		{"GET", "/v1/db/keys?limit=ten", "", 400, "bad_request"},
		{"GET", "/v1/db/keys?pefix=a", "", 400, "bad_request"},
		{"GET", "/v1/db/status?x=1", "", 400, "bad_request"},
		{"POST", "/v1/db/batch?x=1", `{"ops":[{"op":"del","key":"k"}]}`, 400, "bad_request"},

		{"POST", "/v1/db/batch", `{"ops":[{"op":"set","key":"k","value":"v"`, 400, "bad_json"},
		{"POST", "/v1/db/batch", ``, 400, "bad_json"},
		{"POST", "/v1/db/batch", `[]`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k"}]} {}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k"}]}x`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k","extra":1}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k"}],"cas":[]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":7}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k"}],"if":[{"key":"k","index":-1}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", "{\"ops\":[{\"op\":\"del\",\"key\":\"\xff\"}]}", 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"\ud800"}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"\udc00x"}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"a","key":"b"}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"a"}],"ops":[{"op":"del","key":"b"}]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","Key":"a"}]}`, 400, "bad_json"},
		{"POST", "/v1/db/mget", `{"keys":["a","\udbff"]}`, 400, "bad_json"},
		{"POST", "/v1/db/mget", "{\"keys\":[\"\xc3\"]}", 400, "bad_json"},
		{"POST", "/v1/db/mget", `{"keys":["a"],"keys":["b"]}`, 400, "bad_json"},
		{"POST", "/v1/db/batch", `{"ops":[]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"put","key":"k","value":""}]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"set","key":"k","value":"not base64!"}]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"set","key":"k","value":"QQ"}]}`, 400, "bad_request"}, // no padding
		{"POST", "/v1/db/batch", `{"ops":[{"op":"set","key":"k"}]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k","value":""}]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"set","key":"","value":""}]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k"}],"if":[{"key":"k"}]}`, 400, "bad_request"},
		{"POST", "/v1/db/batch", `{"ops":[{"op":"del","key":"k"}],"if":[{"key":"","index":0}]}`, 400, "bad_request"},
		{"POST", "/v1/db/mget", `{"keys":["a",""]}`, 400, "bad_request"},
		{"POST", "/v1/db/mget", `{}`, 400, "bad_request"},
		{"POST", "/v1/db/mget", `{"keys":"a"}`, 400, "bad_json"},
		{"POST", "/v1/db/mget", `{"keys":["a"],"other":1}`, 400, "bad_json"},
		{"POST", "/v1/db/mget", `{"keys":["a","b","c","d"]}`, 413, "too_large"},
		{"POST", "/v1/db/mget?timeout=x&min_index=1", `{"keys":["a"]}`, 400, "bad_request"},

		{"POST", "/v1/db/keys/k", "", 405, "method_not_allowed"},
		{"PUT", "/v1/db/keys", "", 405, "method_not_allowed"},
		{"GET", "/v1/db/batch", "", 405, "method_not_allowed"},
		{"GET", "/v1/db/mget", "", 405, "method_not_allowed"},
		{"POST", "/v1/db/status", "", 405, "method_not_allowed"},
		{"POST", "/healthz", "", 405, "method_not_allowed"},
		{"GET", "/v2/db/keys/k", "", 404, "not_found"},
		{"GET", "/v1/db", "", 404, "not_found"},
		{"GET", "/nothing", "", 404, "not_found"},
		{"POST", "/", "", 404, "not_found"},
	} {
		t.Run(c.method+" "+c.path+" "+c.body, func(t *testing.T) {
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			r := e.do(c.method, c.path, body)
			mustError(t, r, c.status, c.code)
			if c.status == 405 && r.header.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
	// None of that wrote anything.
	if got := e.st.AppliedIndex(); got != 1 {
		t.Fatalf("applied index %d after refused requests", got)
	}
}

func TestErrorTooLarge(t *testing.T) {
	e := newEnv(t, Config{MaxBodyBytes: 1000}, store.Options{MaxValueBytes: 500, MaxKeyBytes: 100, MaxBatchOps: 3})
	big := bytes.Repeat([]byte("x"), 1001)
	mustError(t, e.do("PUT", keyPath("k"), big), 413, "too_large")
	mustError(t, e.do("POST", "/v1/db/batch", big), 413, "too_large")
	mustError(t, e.do("POST", "/v1/db/mget", big), 413, "too_large")
	// Without Content-Length (chunked): caught while reading.
	req, _ := http.NewRequest("PUT", e.srv.URL+keyPath("k"), struct{ *bytes.Reader }{bytes.NewReader(big)})
	req.ContentLength = -1
	mustError(t, e.send(req), 413, "too_large")
	// Within the body limit, over the store's limits.
	mustError(t, e.do("PUT", keyPath("k"), big[:501]), 413, "too_large")
	mustError(t, e.do("PUT", keyPath(strings.Repeat("k", 101)), []byte("v")), 413, "too_large")
	mustError(t, e.do("POST", "/v1/db/batch", []byte(`{"ops":[{"op":"del","key":"a"},{"op":"del","key":"b"},{"op":"del","key":"c"},{"op":"del","key":"d"}]}`)), 413, "too_large")
	// At the limit: fine.
	mustWriteOK(t, e.do("PUT", keyPath("k"), big[:500]))
}

func TestErrorDiskFull(t *testing.T) {
	// A reserve no disk has: every write is refused, reads go on.
	e := newEnv(t, Config{}, store.Options{MinFreeBytes: 1 << 62})
	mustError(t, e.do("PUT", keyPath("k"), []byte("v")), 507, "disk_full")
	mustError(t, e.do("POST", "/v1/db/batch", []byte(`{"ops":[{"op":"del","key":"k"}]}`)), 507, "disk_full")
	mustError(t, e.do("GET", keyPath("k"), nil), 404, "not_found")
	r := e.do("GET", "/v1/db/status", nil)
	if r.status != 200 || !containsStr(r.body, `"disk_full":true`) {
		t.Fatalf("status on a full disk: %d %s", r.status, r.body)
	}
}

func TestErrorStoreClosed(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("k", "v")
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	mustError(t, e.do("PUT", keyPath("k"), []byte("v2")), 503, "unavailable")
	mustError(t, e.do("DELETE", keyPath("k"), nil), 503, "unavailable")
	mustError(t, e.do("POST", "/v1/db/batch", []byte(`{"ops":[{"op":"del","key":"k"}]}`)), 503, "unavailable")
	// A read wait on a closed store ends at once.
	mustError(t, e.do("GET", keyPath("k")+"?min_index=100&timeout=10s", nil), 503, "unavailable")
}

// corruptValue rewrites the value record of key in the store's Pebble
// instance with one whose CRC does not match (the layout of
// internal/store/keys.go and record.go: 'd'+key -> crc32c(4) flags(1)
// index(8) value), and reopens the store.
func corruptValue(t *testing.T, dir, key string, o store.Options) *store.Store {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	rec := append([]byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "secret-value"...)
	if err := db.Set(append([]byte("d"), key...), rec, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o.Dir = dir
	return openStore(t, o)
}

func TestErrorIntegrity(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, store.Options{Dir: dir})
	if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{setOp("a", "fine"), setOp("bad", "x"), setOp("c", "fine")}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st = corruptValue(t, dir, "bad", store.Options{})
	db := &service.Database{Name: "db", Store: st}
	srv := &env{t: t, st: st, db: db, h: New(Config{}, service.Databases{"db": db}, nil)}
	srv.srv = httptest.NewServer(srv.h)
	t.Cleanup(srv.srv.Close)
	for _, r := range []resp{
		srv.do("GET", keyPath("bad"), nil),
		srv.do("GET", "/v1/db/keys", nil),
		srv.do("POST", "/v1/db/mget", []byte(`{"keys":["a","bad"]}`)),
	} {
		mustError(t, r, 500, "integrity")
		if containsStr(r.body, "secret-value") || containsStr(r.body, "fine") {
			t.Fatalf("integrity error leaks a value: %s", r.body)
		}
	}
	// Other keys are served; a scan that does not reach the bad key too.
	if r := srv.do("GET", keyPath("a"), nil); string(r.body) != "fine" {
		t.Fatalf("good key next to a corrupt one: %d %q", r.status, r.body)
	}
	if r := srv.do("GET", "/v1/db/keys?limit=1", nil); r.status != 200 {
		t.Fatalf("scan before the corrupt key: %d %s", r.status, r.body)
	}
	// Overwriting repairs it.
	mustWriteOK(t, srv.do("PUT", keyPath("bad"), []byte("repaired")))
	if r := srv.do("GET", keyPath("bad"), nil); string(r.body) != "repaired" {
		t.Fatalf("repaired key: %d %q", r.status, r.body)
	}
}

func TestPanicIsJSON(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.db.Status = func() map[string]any { panic("boom") }
	mustError(t, e.do("GET", "/v1/db/status", nil), 500, "internal")
	// A Status field JSON cannot hold.
	e.db.Status = func() map[string]any { return map[string]any{"ch": make(chan int)} }
	mustError(t, e.do("GET", "/v1/db/status", nil), 500, "internal")
}

// TestIsCleanPath checks isCleanPath against the cleaning ServeMux does,
// over every path of up to 8 bytes from '/', '.' and 'a'.
func TestIsCleanPath(t *testing.T) {
	muxClean := func(p string) bool { // net/http's cleanPath(p) == p
		np := path.Clean(p)
		if p[len(p)-1] == '/' && np != "/" {
			np += "/"
		}
		return np == p
	}
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if got, want := isCleanPath(prefix), muxClean(prefix); got != want {
			t.Errorf("isCleanPath(%q) = %v, ServeMux says %v", prefix, got, want)
		}
		if n == 0 {
			return
		}
		for _, c := range "/.a" {
			gen(prefix+string(c), n-1)
		}
	}
	gen("/", 7)
	if isCleanPath("") || isCleanPath("a") {
		t.Error("relative path accepted")
	}
}

// quietPebble drops Pebble's log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
