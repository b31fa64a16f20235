package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// keyRequest takes a request only where ServeMux would give the same
// database and key to "GET /v1/{db}/keys/{key...}".
func TestKeyRequestMatchesTheRouter(t *testing.T) {
	mux := http.NewServeMux()
	var gotDB, gotKey string
	var matched bool
	mux.HandleFunc("GET /v1/{db}/keys/{key...}", func(_ http.ResponseWriter, r *http.Request) {
		matched, gotDB, gotKey = true, r.PathValue("db"), r.PathValue("key")
	})
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
	cases := []struct {
		request string // request line and headers, without the final CRLF
		fast    bool   // keyRequest takes it
	}{
		{"GET /v1/db/keys/a HTTP/1.1", true},
		{"GET /v1/db/keys/config/service/key HTTP/1.1", true},
		{"GET /v1/db/keys/config%2Fservice%2Fkey HTTP/1.1", true},
		{"GET /v1/db/keys/a%20b HTTP/1.1", true},
		{"GET /v1/db/keys/%2E%2E HTTP/1.1", true},
		{"GET /v1/db/keys/100%25 HTTP/1.1", true},
		{"GET /v1/db/keys/%41 HTTP/1.1", true},
		{"GET /v1/d%62/keys/a HTTP/1.1", true},
		{"GET /v1/a%2Fkeys%2Fb/keys/c HTTP/1.1", true},
		{"GET /v1/db/keys/a/keys/b HTTP/1.1", true},
		{"GET /v1/keys/keys/x HTTP/1.1", true},
		{"GET /v1/db/keys/a/ HTTP/1.1", true},
		{"GET /v1/db/keys/a?min_index=3 HTTP/1.1", true},
		{"GET /v1/db/keys/%zz HTTP/1.1", false}, // net/http refuses the URL
		{"GET /v1/db/keys/ HTTP/1.1", false},
		{"GET /v1/db/keys HTTP/1.1", false},
		{"GET /v1//keys/a HTTP/1.1", false},
		{"GET /v1/a/b/keys/c HTTP/1.1", false},
		{"GET /v1/db/k%65ys/a HTTP/1.1", false},
		{"GET /v2/db/keys/a HTTP/1.1", false},
		{"GET /v1/db/status HTTP/1.1", false},
		{"HEAD /v1/db/keys/a HTTP/1.1", false},
		{"PUT /v1/db/keys/a HTTP/1.1\r\nContent-Length: 1", false},
		{"GET /v1/db/keys/a HTTP/1.1\r\nContent-Length: 3", false},
		{"GET /v1/db/keys/a HTTP/1.1\r\nTransfer-Encoding: chunked", false},
		{"GET http://other/v1/db/keys/a HTTP/1.1", true},
	}
	for _, c := range cases {
		raw := c.request + "\r\nHost: x\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			if c.fast {
				t.Errorf("%q: %v", c.request, err)
			}
			continue
		}
		if !isCleanPath(req.URL.EscapedPath()) {
			if c.fast {
				t.Errorf("%q: not a clean path; ServeHTTP refuses it first", c.request)
			}
			continue
		}
		db, key, ok := keyRequest(req)
		if ok != c.fast {
			t.Errorf("%q: keyRequest ok = %v, want %v", c.request, ok, c.fast)
		}
		if !ok {
			continue
		}
		matched = false
		mux.ServeHTTP(httptest.NewRecorder(), req)
		if !matched || db != gotDB || key != gotKey {
			t.Errorf("%q: keyRequest gives db %q key %q; the router: matched %v, db %q key %q", c.request, db, key, matched, gotDB, gotKey)
		}
	}
}

// routerOnly serves every request as ServeHTTP does, but for plain GETs
// of a key too through the router: the reference the fast path is held
// to.
func routerOnly(h *handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.refuseUnclean(w, r) {
			h.serveRouted(w, r)
		}
	})
}

// rawDo sends one raw request (request line and headers, without the
// final CRLF; a Content-Length header brings that many bytes of body) on
// a new connection and reads the answer.
func rawDo(t *testing.T, addr, request string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var body string
	if _, n, ok := strings.Cut(request, "Content-Length: "); ok {
		var size int
		fmt.Sscan(n, &size)
		body = strings.Repeat("x", size)
	}
	if _, err := io.WriteString(c, request+"\r\nHost: x\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(request, " ")
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	return res, answer
}

// httpCounts reads every child of qs_http_requests_total and
// qs_http_errors_total of h.
func httpCounts(t *testing.T, h *Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, c := range []prometheus.Collector{h.requests, h.errors} {
		ch := make(chan prometheus.Metric, 256)
		go func() { c.Collect(ch); close(ch) }()
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			key := m.Desc().String()
			for _, l := range pb.GetLabel() {
				key += fmt.Sprintf(" %s=%q", l.GetName(), l.GetValue())
			}
			out[key] = pb.GetCounter().GetValue()
		}
	}
	return out
}

// countsDelta is what changed between two httpCounts.
func countsDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// A GET through the fast path answers as the router does: status, body,
// headers and the metrics it counts, bad inputs included.
func TestFastGetAnswersAsTheRouter(t *testing.T) {
	e := newEnv(t, DefaultConfig(), store.Options{})
	ref := httptest.NewServer(routerOnly(e.h.(*handler)))
	t.Cleanup(ref.Close)
	expires := time.Now().Add(time.Hour).UnixNano()
	ops := []wal.Op{
		{Type: wal.OpSet, Key: []byte("a"), Value: []byte("value of a")},
		{Type: wal.OpSet, Key: []byte("config/service/key"), Value: []byte("nested")},
		{Type: wal.OpSet, Key: []byte("a b"), Value: []byte("spaced")},
		{Type: wal.OpSet, Key: []byte("100%"), Value: []byte("percent")},
		{Type: wal.OpSet, Key: []byte("empty"), Value: []byte{}},
		{Type: wal.OpSet, Key: []byte("flagged"), Value: []byte("f"), Flags: 42, Expires: expires},
		{Type: wal.OpSet, Key: []byte("large"), Value: bytes.Repeat([]byte("L"), directWriteMax+1)},
	}
	if _, err := e.st.Write(context.Background(), store.Batch{Ops: ops}); err != nil {
		t.Fatal(err)
	}
	applied := e.st.AppliedIndex()
	requests := []string{
		"GET /v1/db/keys/a HTTP/1.1",
		"GET /v1/db/keys/config/service/key HTTP/1.1",
		"GET /v1/db/keys/config%2Fservice%2Fkey HTTP/1.1",
		"GET /v1/db/keys/a%20b HTTP/1.1",
		"GET /v1/db/keys/100%25 HTTP/1.1",
		"GET /v1/db/keys/empty HTTP/1.1",
		"GET /v1/db/keys/flagged HTTP/1.1",
		"GET /v1/db/keys/large HTTP/1.1",
		"GET /v1/db/keys/missing HTTP/1.1",
		"GET /v1/nodb/keys/a HTTP/1.1",
		"GET /v1/db/keys/ HTTP/1.1",
		"GET /v1/db/keys/a?min_index=1 HTTP/1.1",
		fmt.Sprintf("GET /v1/db/keys/a?min_index=%d&timeout=1ms HTTP/1.1", applied+1000),
		"GET /v1/db/keys/a?min_index=abc HTTP/1.1",
		"GET /v1/db/keys/a?timeout=-1s HTTP/1.1",
		"GET /v1/db/keys/a?colour=red HTTP/1.1",
		"GET /v1/db/keys/a?min_index=1&min_index=2 HTTP/1.1",
		"GET /v1/db/keys/a?%zz HTTP/1.1",
		"GET /v1/db/keys/a//b HTTP/1.1",
		"GET /v1/db/keys/%2e%2e/x HTTP/1.1",
		"HEAD /v1/db/keys/a HTTP/1.1",
		"POST /v1/db/keys/a HTTP/1.1\r\nContent-Length: 0",
		"GET /v1/db/keys/a HTTP/1.1\r\nContent-Length: 2",
	}
	// A request is counted after its answer is written: wait for the
	// count before the next request (bounded), so that each delta holds
	// exactly one request's.
	counted := func(before map[string]float64) map[string]float64 {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			now := httpCounts(t, e.m)
			for k := range countsDelta(before, now) {
				if strings.Contains(k, "qs_http_requests_total") {
					return now
				}
			}
			if time.Now().After(deadline) {
				return now
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, rq := range requests {
		c0 := httpCounts(t, e.m)
		fast, fastBody := rawDo(t, e.srv.Listener.Addr().String(), rq)
		c1 := counted(c0)
		slow, slowBody := rawDo(t, ref.Listener.Addr().String(), rq)
		c2 := counted(c1)
		if fast.StatusCode != slow.StatusCode {
			t.Errorf("%q: status %d, router %d", rq, fast.StatusCode, slow.StatusCode)
		}
		if !bytes.Equal(fastBody, slowBody) {
			t.Errorf("%q: body %.200q, router %.200q", rq, fastBody, slowBody)
		}
		fast.Header.Del("Date")
		slow.Header.Del("Date")
		if fh, sh := fmt.Sprint(fast.Header), fmt.Sprint(slow.Header); fh != sh {
			t.Errorf("%q: headers %s, router %s", rq, fh, sh)
		}
		if fd, sd := countsDelta(c0, c1), countsDelta(c1, c2); fmt.Sprint(fd) != fmt.Sprint(sd) || len(fd) == 0 {
			t.Errorf("%q: counted %v, router %v", rq, fd, sd)
		}
	}
	// What the answers say, beyond being the router's.
	res, body := rawDo(t, e.srv.Listener.Addr().String(), "GET /v1/db/keys/flagged HTTP/1.1")
	if res.StatusCode != http.StatusOK || string(body) != "f" || res.Header.Get("Qs-Flags") != "42" ||
		res.Header.Get("Qs-Expires") != fmt.Sprint(expires) || res.Header.Get("Qs-Applied-Index") != fmt.Sprint(applied) {
		t.Errorf("flagged: %d %q %v", res.StatusCode, body, res.Header)
	}
	res, body = rawDo(t, e.srv.Listener.Addr().String(), "GET /v1/nodb/keys/a HTTP/1.1")
	if res.StatusCode != http.StatusNotFound || !bytes.Contains(body, []byte("unknown_database")) {
		t.Errorf("unknown database: %d %s", res.StatusCode, body)
	}
}

// Keep-alive connections carry plain GETs and other requests in any order.
func TestFastGetOnKeepAliveConnection(t *testing.T) {
	e := newEnv(t, DefaultConfig(), store.Options{})
	e.put("k", "v1")
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	roundTrip := func(method, target, body string) (*http.Response, string) {
		t.Helper()
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", method, target, len(body), body)
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res, string(b)
	}
	for i := range 3 {
		if res, b := roundTrip("GET", "/v1/db/keys/k", ""); res.StatusCode != http.StatusOK || b != fmt.Sprintf("v%d", i+1) {
			t.Fatalf("GET %d: %d %q", i, res.StatusCode, b)
		}
		if res, b := roundTrip("PUT", "/v1/db/keys/k", fmt.Sprintf("v%d", i+2)); res.StatusCode != http.StatusOK {
			t.Fatalf("PUT %d: %d %s", i, res.StatusCode, b)
		}
	}
	if res, b := roundTrip("GET", "/v1/db/keys/nope", ""); res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET of a missing key: %d %s", res.StatusCode, b)
	}
}

// A client that stops reading a large value through the fast path has its
// connection closed after the write timeout, and is counted.
func TestFastGetNonReadingClientsAreCut(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WriteTimeout = time.Second
	e := newEnv(t, cfg, store.Options{})
	big := bytes.Repeat([]byte("x"), 16<<20)
	if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("big"), Value: big}}}); err != nil {
		t.Fatal(err)
	}
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	timeouts0 := testutil.ToFloat64(e.m.writeTimeouts)
	const clients = 3
	for range clients {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(4 << 10)
		io.WriteString(c, "GET /v1/db/keys/big HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	waitMetric(t, "write timeouts", func() float64 { return testutil.ToFloat64(e.m.writeTimeouts) - timeouts0 }, clients)
	waitMetric(t, "connections closed by the server", func() float64 { return float64(closed.Load()) }, clients)
}
