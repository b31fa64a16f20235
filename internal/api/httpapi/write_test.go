package httpapi

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/store"
)

func TestPutGetDelete(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	w := e.put("k", "hello")
	if w.Index != 1 || !w.Changed {
		t.Fatalf("put: %+v", w)
	}
	r := e.do("GET", keyPath("k"), nil)
	if r.status != 200 || string(r.body) != "hello" {
		t.Fatalf("get: %d %q", r.status, r.body)
	}
	for h, want := range map[string]string{
		"Content-Type": "application/octet-stream", "Content-Length": "5",
		"Qs-Index": "1", "Qs-Applied-Index": "1",
	} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	// HEAD: headers only.
	r = e.do("HEAD", keyPath("k"), nil)
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Qs-Index") != "1" {
		t.Fatalf("head: %d %q %v", r.status, r.body, r.header)
	}

	e.put("other", "x") // index 2
	// Identical rewrite: no entry, answered with the applied index.
	if w := e.put("k", "hello"); w.Changed || w.Index != 2 {
		t.Fatalf("identical put: %+v", w)
	}
	r = e.do("GET", keyPath("k"), nil)
	if r.header.Get("Qs-Index") != "1" || r.header.Get("Qs-Applied-Index") != "2" {
		t.Fatalf("after other write: Qs-Index %q Qs-Applied-Index %q", r.header.Get("Qs-Index"), r.header.Get("Qs-Applied-Index"))
	}

	w = mustWriteOK(t, e.do("DELETE", keyPath("k"), nil))
	if w.Index != 3 || !w.Changed {
		t.Fatalf("delete: %+v", w)
	}
	r = e.do("GET", keyPath("k"), nil)
	mustError(t, r, 404, "not_found")
	if got := r.header.Get("Qs-Applied-Index"); got != "3" {
		t.Fatalf("404 Qs-Applied-Index %q, want 3", got)
	}
	// Delete of an absent key: 200, changed false.
	w = mustWriteOK(t, e.do("DELETE", keyPath("k"), nil))
	if w.Changed || w.Index != 3 {
		t.Fatalf("delete absent: %+v", w)
	}
}

func TestPutEmptyAndBinaryValues(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{ChunkBytes: 1024})
	e.put("empty", "")
	r := e.do("GET", keyPath("empty"), nil)
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "0" {
		t.Fatalf("empty value: %d %q %v", r.status, r.body, r.header)
	}
	bin := []byte{0, 1, 2, 0xff, '\n', 0}
	e.put("bin", string(bin))
	if r := e.do("GET", keyPath("bin"), nil); !bytes.Equal(r.body, bin) {
		t.Fatalf("binary value %q", r.body)
	}
	// Larger than directWriteMax, and chunked in the store.
	big := bytes.Repeat([]byte("0123456789abcdef"), 5000)
	e.put("big", string(big))
	r = e.do("GET", keyPath("big"), nil)
	if r.status != 200 || !bytes.Equal(r.body, big) || r.header.Get("Content-Length") != strconv.Itoa(len(big)) {
		t.Fatalf("big value: status %d, %d bytes", r.status, len(r.body))
	}
}

func TestSpecialKeys(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	keys := []string{
		"a/b/c", "with space", "pct%2Fliteral", "%", "ключ/ü", "日本語", "..", ".", "a/../b", "a//b",
		"/leading", "trailing/", "q?x=1#frag", "+plus+", "semi;colon", "tab\tnew\nline", "x\x00y",
	}
	for i, k := range keys {
		v := "value-" + strconv.Itoa(i)
		e.put(k, v)
		r := e.do("GET", keyPath(k), nil)
		if r.status != 200 || string(r.body) != v {
			t.Fatalf("key %q: %d %q", k, r.status, r.body)
		}
	}
	// Every key round-trips through scan exactly as written.
	r := e.do("GET", "/v1/db/keys", nil)
	var s scanReply
	mustDecode(t, r.body, &s)
	got := map[string]string{}
	for _, it := range s.Items {
		got[it.Key] = string(it.Value)
	}
	for i, k := range keys {
		if got[k] != "value-"+strconv.Itoa(i) {
			t.Errorf("scan: key %q has %q", k, got[k])
		}
	}
	if len(s.Items) != len(keys) {
		t.Errorf("scan: %d keys, want %d", len(s.Items), len(keys))
	}
	// A literal "%2F" in the path is a '/' in the key.
	r = e.do("GET", "/v1/db/keys/a%2Fb%2Fc", nil)
	if string(r.body) != "value-0" {
		t.Fatalf("%%2F path: %d %q", r.status, r.body)
	}
	// Unclean paths are refused, never redirected to another key.
	for _, p := range []string{"/v1/db/keys/a//b", "/v1/db/keys/a/../b", "/v1/db/keys/.", "/v1/db/keys/x/./y"} {
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			mustError(t, e.do(m, p, []byte("oops")), 400, "bad_request")
		}
	}
	if r := e.do("GET", keyPath("a/b"), nil); r.status != 404 {
		t.Fatalf("unclean PUT wrote a/b: %d %q", r.status, r.body)
	}
	// Keys that are not UTF-8 work through the key endpoints.
	raw := "\xff\xfe"
	e.put(raw, "raw")
	if r := e.do("GET", keyPath(raw), nil); string(r.body) != "raw" {
		t.Fatalf("non-UTF-8 key: %d %q", r.status, r.body)
	}
}

func TestCompareAndSwap(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	// if_index=0: must not exist.
	w := mustWriteOK(t, e.do("PUT", keyPath("k")+"?if_index=0", []byte("v1")))
	mustError(t, e.do("PUT", keyPath("k")+"?if_index=0", []byte("v2")), 409, "condition_failed")
	mustError(t, e.do("PUT", keyPath("k")+"?if_index=99", []byte("v2")), 409, "condition_failed")
	if r := e.do("GET", keyPath("k"), nil); string(r.body) != "v1" {
		t.Fatalf("failed CAS changed the value: %q", r.body)
	}
	w2 := mustWriteOK(t, e.do("PUT", keyPath("k")+"?if_index="+strconv.FormatUint(w.Index, 10), []byte("v2")))
	if w2.Index != w.Index+1 {
		t.Fatalf("CAS put: %+v", w2)
	}
	// DELETE with a stale index fails and leaves the key.
	mustError(t, e.do("DELETE", keyPath("k")+"?if_index="+strconv.FormatUint(w.Index, 10), nil), 409, "condition_failed")
	if r := e.do("GET", keyPath("k"), nil); string(r.body) != "v2" {
		t.Fatalf("failed CAS delete changed the value: %q", r.body)
	}
	mustWriteOK(t, e.do("DELETE", keyPath("k")+"?if_index="+strconv.FormatUint(w2.Index, 10), nil))
	if r := e.do("GET", keyPath("k"), nil); r.status != 404 {
		t.Fatalf("CAS delete: key still there: %d", r.status)
	}
	// DELETE if_index=0 of an absent key holds (and changes nothing).
	if w := mustWriteOK(t, e.do("DELETE", keyPath("k")+"?if_index=0", nil)); w.Changed {
		t.Fatalf("delete absent with if_index=0: %+v", w)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestBatch(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("gone", "x") // 1
	body := `{"ops":[{"op":"set","key":"a","value":"` + b64("A") + `"},{"op":"set","key":"b/c","value":"` + b64("B") + `"},{"op":"del","key":"gone"}]}`
	w := mustWriteOK(t, e.do("POST", "/v1/db/batch", []byte(body)))
	if w.Index != 2 || !w.Changed {
		t.Fatalf("batch: %+v", w)
	}
	for k, want := range map[string]string{"a": "A", "b/c": "B"} {
		r := e.do("GET", keyPath(k), nil)
		if string(r.body) != want || r.header.Get("Qs-Index") != "2" {
			t.Fatalf("%s: %q at %s", k, r.body, r.header.Get("Qs-Index"))
		}
	}
	if r := e.do("GET", keyPath("gone"), nil); r.status != 404 {
		t.Fatalf("deleted key: %d", r.status)
	}
	// A no-op batch.
	w = mustWriteOK(t, e.do("POST", "/v1/db/batch", []byte(`{"ops":[{"op":"del","key":"gone"}]}`)))
	if w.Changed || w.Index != 2 {
		t.Fatalf("noop batch: %+v", w)
	}
}

func TestBatchConditionsAtomic(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("a", "1") // 1
	e.put("b", "1") // 2
	// One good condition, one failing: nothing changes.
	body := `{"ops":[{"op":"set","key":"a","value":"` + b64("2") + `"},{"op":"del","key":"b"},{"op":"set","key":"new","value":""}],
		"if":[{"key":"a","index":1},{"key":"b","index":1}]}`
	mustError(t, e.do("POST", "/v1/db/batch", []byte(body)), 409, "condition_failed")
	if got := e.st.AppliedIndex(); got != 2 {
		t.Fatalf("failed batch moved the applied index to %d", got)
	}
	for k, want := range map[string]string{"a": "1", "b": "1"} {
		if r := e.do("GET", keyPath(k), nil); string(r.body) != want {
			t.Fatalf("failed batch changed %s to %q", k, r.body)
		}
	}
	if r := e.do("GET", keyPath("new"), nil); r.status != 404 {
		t.Fatalf("failed batch created a key: %d", r.status)
	}
	// Conditions that hold, including "must not exist".
	body = `{"ops":[{"op":"set","key":"a","value":"` + b64("2") + `"},{"op":"del","key":"b"},{"op":"set","key":"new","value":""}],
		"if":[{"key":"a","index":1},{"key":"b","index":2},{"key":"new","index":0}]}`
	if w := mustWriteOK(t, e.do("POST", "/v1/db/batch", []byte(body))); w.Index != 3 {
		t.Fatalf("batch with holding conditions: %+v", w)
	}
	if r := e.do("GET", keyPath("a"), nil); string(r.body) != "2" {
		t.Fatalf("a = %q", r.body)
	}
	if r := e.do("GET", keyPath("new"), nil); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("new: %d %q", r.status, r.body)
	}
}

var (
	errNotRootTest = fmt.Errorf("%w: the root is root-node:7000", store.ErrNotRoot)
	errPlain       = errors.New("raft: no leader; the root was root-node:7000")
)

func TestWriteOnReplicaRefused(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("k", "v")
	e.setWriteErr(errNotRootTest)
	for _, r := range []resp{
		e.do("PUT", keyPath("k"), []byte("new")),
		e.do("DELETE", keyPath("k"), nil),
		e.do("POST", "/v1/db/batch", []byte(`{"ops":[{"op":"del","key":"k"}]}`)),
	} {
		er := mustError(t, r, http.StatusForbidden, "not_root")
		if !bytes.Contains([]byte(er.Error.Message), []byte("root-node:7000")) {
			t.Fatalf("not_root message does not name the root: %q", er.Error.Message)
		}
	}
	// Reads keep working on a replica.
	if r := e.do("GET", keyPath("k"), nil); string(r.body) != "v" {
		t.Fatalf("read on replica: %d %q", r.status, r.body)
	}
	// A CanWrite error that does not wrap ErrNotRoot is still not_root.
	e.setWriteErr(errPlain)
	mustError(t, e.do("PUT", keyPath("k"), []byte("new")), http.StatusForbidden, "not_root")
}

// TestNotRootNamesRootHTTP: a refusal that knows the root's HTTP
// addresses carries them in root_http and in its message; one that does
// not has no root_http and says it does not know.
func TestNotRootNamesRootHTTP(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("k", "v")
	e.setWriteErr(&store.NotRootError{Database: "db", Root: []string{"root-1:7380", "root-2:7380"}, Detail: "database db is a replica on this node"})
	er := mustError(t, e.do("PUT", keyPath("k"), []byte("new")), http.StatusForbidden, "not_root")
	if !slices.Equal(er.Error.RootHTTP, []string{"root-1:7380", "root-2:7380"}) ||
		!strings.Contains(er.Error.Message, "http://root-1:7380 or http://root-2:7380") {
		t.Fatalf("not_root with the root known: %+v", er.Error)
	}
	e.setWriteErr(&store.NotRootError{Database: "db", Detail: "database db is a replica on this node"})
	er = mustError(t, e.do("PUT", keyPath("k"), []byte("new")), http.StatusForbidden, "not_root")
	if er.Error.RootHTTP != nil || !strings.Contains(er.Error.Message, "not known") {
		t.Fatalf("not_root with the root unknown: %+v", er.Error)
	}
	if r := e.do("GET", keyPath("k"), nil); string(r.body) != "v" {
		t.Fatalf("the refused writes changed the key: %d %q", r.status, r.body)
	}
}

// TestStrictJSONKeepsKeysApart: keys that are not valid UTF-8 (a raw byte,
// escaped lone surrogates) are refused, not turned into U+FFFD, which made
// different keys overwrite one another; a surrogate pair is a valid key.
func TestStrictJSONKeepsKeysApart(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	for _, key := range []string{`\ud800`, `\udfff`, "\xff", `\ud800\u0041`} {
		body := `{"ops":[{"op":"set","key":"` + key + `","value":"` + b64("x") + `"}]}`
		mustError(t, e.do("POST", "/v1/db/batch", []byte(body)), 400, "bad_json")
	}
	if r := e.do("GET", keyPath("\ufffd"), nil); r.status != 404 {
		t.Fatalf("a refused key was stored as U+FFFD: %d %q", r.status, r.body)
	}
	if got := e.st.AppliedIndex(); got != 0 {
		t.Fatalf("refused batches moved the applied index to %d", got)
	}
	body := `{"ops":[{"op":"set","key":"\ud83d\ude00","value":"` + b64("ok") + `"}]}`
	mustWriteOK(t, e.do("POST", "/v1/db/batch", []byte(body)))
	if r := e.do("GET", keyPath("\U0001F600"), nil); string(r.body) != "ok" {
		t.Fatalf("surrogate pair key: %d %q", r.status, r.body)
	}
}

// TestClientFlagsHeader: a PUT stores the Qs-Flags header's client flags
// with the value and a GET returns them (no header: flags 0); a bad
// header is refused, counted, and leaves the stored value intact.
func TestClientFlagsHeader(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	put := func(value string, flags ...string) resp {
		req, err := http.NewRequest("PUT", e.srv.URL+keyPath("k"), bytes.NewReader([]byte(value)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flags {
			req.Header.Add("Qs-Flags", f)
		}
		return e.send(req)
	}
	mustWriteOK(t, put("v", "4294967295"))
	r := e.do("GET", keyPath("k"), nil)
	if r.status != 200 || r.header.Get("Qs-Flags") != "4294967295" || string(r.body) != "v" {
		t.Fatalf("get: %d %q %v", r.status, r.body, r.header)
	}
	// The same value with other flags is a write.
	if w := mustWriteOK(t, put("v", "7")); !w.Changed {
		t.Fatalf("put with new flags: %+v", w)
	}
	if r := e.do("GET", keyPath("k"), nil); r.header.Get("Qs-Flags") != "7" {
		t.Fatalf("flags after rewrite: %v", r.header)
	}
	before := testutil.ToFloat64(e.m.errorsByCode[codeBadRequest])
	for _, bad := range [][]string{{"-1"}, {"4294967296"}, {"x"}, {""}, {"1", "2"}} {
		mustError(t, put("bad", bad...), 400, "bad_request")
	}
	req, _ := http.NewRequest("DELETE", e.srv.URL+keyPath("k"), nil)
	req.Header.Set("Qs-Flags", "1")
	mustError(t, e.send(req), 400, "bad_request")
	if got := testutil.ToFloat64(e.m.errorsByCode[codeBadRequest]); got != before+6 {
		t.Fatalf("bad_request errors counted %v, want %v", got, before+6)
	}
	r = e.do("GET", keyPath("k"), nil)
	if string(r.body) != "v" || r.header.Get("Qs-Flags") != "7" {
		t.Fatalf("after refused writes: %q %v", r.body, r.header)
	}
	mustWriteOK(t, put("w"))
	if r := e.do("GET", keyPath("k"), nil); r.header.Get("Qs-Flags") != "" || string(r.body) != "w" {
		t.Fatalf("put without the header: %q %v", r.body, r.header)
	}
}

// TestTTLQuery: a PUT with ttl=N gives the key an expiry N seconds ahead,
// returned by a GET as Qs-Expires (Unix ns); a bad ttl, or one on a DELETE,
// is refused and changes nothing.
func TestTTLQuery(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	before := time.Now().UnixNano()
	mustWriteOK(t, e.do("PUT", keyPath("k")+"?ttl=60", []byte("v")))
	r := e.do("GET", keyPath("k"), nil)
	exp, err := strconv.ParseInt(r.header.Get("Qs-Expires"), 10, 64)
	if err != nil || exp < before+60e9 || exp > time.Now().UnixNano()+60e9 {
		t.Fatalf("Qs-Expires %q after a PUT with ttl=60 at %d", r.header.Get("Qs-Expires"), before)
	}
	for _, bad := range []string{"PUT ?ttl=0", "PUT ?ttl=-5", "PUT ?ttl=x", "PUT ?ttl=4294967296", "DELETE ?ttl=5"} {
		method, q, _ := strings.Cut(bad, " ")
		mustError(t, e.do(method, keyPath("k")+q, []byte("w")), 400, "bad_request")
	}
	mustWriteOK(t, e.do("PUT", keyPath("k"), []byte("v")))
	if r := e.do("GET", keyPath("k"), nil); r.header.Get("Qs-Expires") != "" || string(r.body) != "v" {
		t.Fatalf("after a PUT without ttl: %q %v", r.body, r.header)
	}
}
