package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// getKeyHandler is the API for database "db", holding key
// "config/service/key" with a 100-byte value, behind a connection limit
// as qs serve puts it.
func getKeyHandler(tb testing.TB) (http.Handler, *ConnLimit) {
	tb.Helper()
	st := openStore(tb, store.Options{})
	val := bytes.Repeat([]byte("v"), 100)
	if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("config/service/key"), Value: val}}}); err != nil {
		tb.Fatal(err)
	}
	m := NewMetrics()
	limit := &ConnLimit{Max: 16, Metrics: m}
	return limit.Wrap(New(Config{Metrics: m}, service.Databases{"db": &service.Database{Name: "db", Store: st}}, nil)), limit
}

// serveLoopback serves h on a loopback listener with the timeouts qs
// serve gives its HTTP server, and returns its address.
func serveLoopback(tb testing.TB, h http.Handler, connState func(net.Conn, http.ConnState)) string {
	tb.Helper()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnState:         connState,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	tb.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// getKeyServer serves getKeyHandler on loopback and returns its address.
func getKeyServer(tb testing.TB) string {
	h, limit := getKeyHandler(tb)
	return serveLoopback(tb, h, limit.ConnState)
}

// rawGetter sends one GET at a time on a keep-alive connection and reads
// the answer without allocating, so that allocations counted while it
// runs are the server's.
type rawGetter struct {
	conn net.Conn
	br   *bufio.Reader
	req  []byte
	body []byte
}

func newRawGetter(tb testing.TB, addr, path string) *rawGetter {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawGetter{
		conn: c,
		br:   bufio.NewReaderSize(c, 4096),
		req:  []byte("GET " + path + " HTTP/1.1\r\nHost: qs\r\n\r\n"),
		body: make([]byte, 4096),
	}
}

var errBadAnswer = fmt.Errorf("httpapi test: not a 200 answer with a Content-Length")

// get sends the request and returns the length of the answer's body.
func (g *rawGetter) get() (int, error) {
	if _, err := g.conn.Write(g.req); err != nil {
		return 0, err
	}
	line, err := g.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return 0, errBadAnswer
	}
	n := -1
	for {
		line, err := g.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n = 0
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
		}
	}
	if n < 0 || n > len(g.body) {
		return 0, errBadAnswer
	}
	if _, err := io.ReadFull(g.br, g.body[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

// BenchmarkGetKeyHTTP measures a single-key GET with a 100-byte value
// through net/http on a loopback keep-alive connection: reading and
// parsing the request, the handler, writing the answer. allocs/op are the
// process's, and the client allocates nothing. cpu-ns/op is the CPU time
// of the process (server and client, user and system) per GET: on a
// loaded machine ns/op is mostly waiting, cpu-ns/op is the cost. The
// "net/http" case answers the same headers and value from a handler that
// does nothing else: the floor under the API's cost.
func BenchmarkGetKeyHTTP(b *testing.B) {
	b.Run("api", func(b *testing.B) {
		benchGets(b, getKeyServer(b))
	})
	b.Run("net/http", func(b *testing.B) {
		val := bytes.Repeat([]byte("v"), 100)
		addr := serveLoopback(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			setValueHeaders(w.Header(), len(val), 7, 7)
			w.Write(val)
		}), nil)
		benchGets(b, addr)
	})
}

func benchGets(b *testing.B, addr string) {
	g := newRawGetter(b, addr, "/v1/db/keys/config/service/key")
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if n, err := g.get(); err != nil || n != 100 {
			b.Fatalf("got %d bytes: %v", n, err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// maxGetKeyAllocs bounds the allocations of one single-key GET served
// over a connection, net/http's included: go1.26 makes 21 (4 of them the
// handler's), so the bound leaves a margin of two; the same GET through
// the router (no fast path) makes 30.
const maxGetKeyAllocs = 23

// TestGetKeyAllocations pins the allocations of a GET over a real
// connection, so that per-request work added to the fast path shows.
func TestGetKeyAllocations(t *testing.T) {
	g := newRawGetter(t, getKeyServer(t), "/v1/db/keys/config/service/key")
	var err error
	get := func() {
		if _, e := g.get(); e != nil && err == nil {
			err = e
		}
	}
	for range 10 { // connection, caches and pools warmed up
		get()
	}
	n := testing.AllocsPerRun(200, get)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f allocations per GET", n)
	if n > maxGetKeyAllocs {
		t.Errorf("%.0f allocations per GET, want at most %d", n, maxGetKeyAllocs)
	}
}
