package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// fillLarge writes n values of size bytes ("big/000"...) and returns the
// mget body naming them.
func fillLarge(t *testing.T, e *env, n, size int) []byte {
	t.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("big/%03d", i)
		v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(k), Value: v}}}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return jsonBody(t, map[string]any{"keys": keys})
}

func waitMetric(t *testing.T, what string, get func() float64, want float64) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); get() < want; {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", what, get(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A body that stops arriving is answered 408 request_timeout and its
// connection closed, instead of holding the connection for good.
func TestSlowBodyGets408AndClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BodyTimeout = 100 * time.Millisecond
	e := newEnv(t, cfg, store.Options{})
	before := testutil.ToFloat64(e.m.errorsByCode[codeRequestTimeout])
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "PUT /v1/db/keys/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "request_timeout") {
		t.Fatalf("slow body: %d %s", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Fatal("the connection of a slow body is kept open")
	}
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("server sent %d more bytes instead of closing", n)
	}
	if got := testutil.ToFloat64(e.m.errorsByCode[codeRequestTimeout]); got != before+1 {
		t.Fatalf("request_timeout errors %v → %v", before, got)
	}
	// Nothing was written.
	mustError(t, e.do("GET", keyPath("a"), nil), http.StatusNotFound, "not_found")
}

// mget clients that never read their (large) answers hold little of the
// server's memory (answers are streamed, not built whole), and the server
// closes their connections after the write timeout.
func TestNonReadingMgetClientsAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WriteTimeout = 2 * time.Second
	e := newEnv(t, cfg, store.Options{})
	req := fillLarge(t, e, 64, 128<<10) // an 11 MiB answer
	const clients = 8
	answer := base64.StdEncoding.EncodedLen(64 * 128 << 10)
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	streamed0 := testutil.ToFloat64(e.m.answersStreamed)
	timeouts0 := testutil.ToFloat64(e.m.writeTimeouts)
	stall := func(n int) {
		for range n {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.(*net.TCPConn).SetReadBuffer(4 << 10)
			fmt.Fprintf(c, "POST /v1/db/mget HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
		}
	}
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	// What one stalled client costs, beyond what the first one brought in
	// for all (the values read into the store's caches): the heap with one
	// stalled client against the heap with all of them.
	stall(1)
	waitMetric(t, "answers streamed", func() float64 { return testutil.ToFloat64(e.m.answersStreamed) - streamed0 }, 1)
	h1 := heap()
	stall(clients - 1)
	waitMetric(t, "answers streamed", func() float64 { return testutil.ToFloat64(e.m.answersStreamed) - streamed0 }, clients)
	each := (heap() - h1) / (clients - 1)
	t.Logf("each further stalled client of a %d MiB answer: heap %+d KiB", answer>>20, each>>10)
	// Streamed, a client holds the answer's buffer up to streamThreshold
	// (its capacity up to twice that; more under the race detector); built
	// whole, it would hold at least the whole answer.
	if each > int64(answer/2) {
		t.Fatalf("each stalled mget client holds %d KiB of heap (answers of %d MiB each)", each>>10, answer>>20)
	}
	waitMetric(t, "write timeouts", func() float64 { return testutil.ToFloat64(e.m.writeTimeouts) - timeouts0 }, clients)
	waitMetric(t, "connections closed by the server", func() float64 { return float64(closed.Load()) }, clients)
}

// A streamed answer that fails part way (here: over MaxResponseBytes)
// cuts the connection; the client never gets a short answer that parses.
func TestStreamedAnswerFailingPartWayCutsTheConnection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxResponseBytes = 3 << 20
	e := newEnv(t, cfg, store.Options{})
	req := fillLarge(t, e, 64, 128<<10)
	cut := testutil.ToFloat64(e.m.answersCut)
	resp, err := http.Post(e.srv.URL+"/v1/db/mget", "application/json", bytes.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		var v any
		if json.Unmarshal(body, &v) == nil {
			t.Fatalf("a failed streamed answer parsed (%d bytes, status %d)", len(body), resp.StatusCode)
		}
		t.Fatalf("a failed streamed answer ended cleanly (%d bytes)", len(body))
	}
	if got := testutil.ToFloat64(e.m.answersCut); got != cut+1 {
		t.Fatalf("answers cut %v → %v", cut, got)
	}
}

// Streamed scan and mget answers are the same documents as built ones.
func TestStreamedAnswersAreWhole(t *testing.T) {
	e := newEnv(t, DefaultConfig(), store.Options{})
	req := fillLarge(t, e, 40, 64<<10)
	streamed := testutil.ToFloat64(e.m.answersStreamed)
	r := e.do("POST", "/v1/db/mget", req)
	var mg struct {
		Index  uint64
		Values map[string]string
	}
	mustDecode(t, r.body, &mg)
	if len(mg.Values) != 40 {
		t.Fatalf("mget: %d values", len(mg.Values))
	}
	for k, v := range mg.Values {
		b, _ := base64.StdEncoding.DecodeString(v)
		if len(b) != 64<<10 || !strings.HasPrefix(k, "big/") {
			t.Fatalf("mget %s: %d bytes", k, len(b))
		}
	}
	r = e.do("GET", "/v1/db/keys?prefix=big/&limit=100", nil)
	var sc struct {
		Index uint64
		Items []struct {
			Key, Value string
			Index      uint64
		}
		Next *string
	}
	mustDecode(t, r.body, &sc)
	if len(sc.Items) != 40 || sc.Next != nil {
		t.Fatalf("scan: %d items, next %v", len(sc.Items), sc.Next)
	}
	if got := testutil.ToFloat64(e.m.answersStreamed); got != streamed+2 {
		t.Fatalf("answers streamed %v → %v, want both", streamed, got)
	}
}

// While max connections are open, a new connection still gets /healthz
// and /metrics; anything else is answered 503 and closed.
func TestConnLimitKeepsRoomForHealthAndMetrics(t *testing.T) {
	e := newEnv(t, DefaultConfig(), store.Options{})
	limit := &ConnLimit{Max: 3, Metrics: e.m}
	srv := httptest.NewUnstartedServer(limit.Wrap(e.h))
	srv.Config.ConnState = limit.ConnState
	srv.Start()
	t.Cleanup(srv.Close)
	for range 3 { // idle connections holding the whole budget
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitMetric(t, "open connections", func() float64 { return float64(limit.Open()) }, 3)
	refused := testutil.ToFloat64(e.m.connsRefused)
	get := func(path string) (int, string) {
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 60 * time.Second}).Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("/healthz"); st != http.StatusOK {
		t.Fatalf("/healthz over the limit: %d", st)
	}
	if st, _ := get("/metrics"); st != http.StatusOK {
		t.Fatalf("/metrics over the limit: %d", st)
	}
	if st, body := get(keyPath("a")); st != http.StatusServiceUnavailable || !strings.Contains(body, "max_http_conns") {
		t.Fatalf("read over the limit: %d %s", st, body)
	}
	if got := testutil.ToFloat64(e.m.connsRefused); got != refused+1 {
		t.Fatalf("refused %v → %v", refused, got)
	}
}
