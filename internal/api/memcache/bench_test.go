package memcache

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// repeatConn is a net.Conn whose input is req repeated left times; what is
// written to it is counted and dropped.
type repeatConn struct {
	req     []byte
	left    int
	off     int // offset in req of the next byte
	written int64
	closed  bool
}

func (r *repeatConn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.left > 0 {
		k := copy(p[n:], r.req[r.off:])
		n += k
		r.off += k
		if r.off == len(r.req) {
			r.off = 0
			r.left--
		}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *repeatConn) Write(p []byte) (int, error)        { r.written += int64(len(p)); return len(p), nil }
func (r *repeatConn) Close() error                       { r.closed = true; return nil }
func (r *repeatConn) LocalAddr() net.Addr                { return memAddr{} }
func (r *repeatConn) RemoteAddr() net.Addr               { return memAddr{} }
func (r *repeatConn) SetDeadline(t time.Time) error      { return nil }
func (r *repeatConn) SetReadDeadline(t time.Time) error  { return nil }
func (r *repeatConn) SetWriteDeadline(t time.Time) error { return nil }

// staticBackend is a trivial read-only Backend: a map read without locks.
type staticBackend map[string][]byte

func (m staticBackend) Get(keys [][]byte, found func(key, value []byte, index uint64, a Attrs)) (uint64, error) {
	for _, k := range keys {
		if v, ok := m[string(k)]; ok {
			found(k, v, 42, Attrs{})
		}
	}
	return 42, nil
}
func (m staticBackend) Set(ctx context.Context, key, value []byte, a Attrs) (uint64, error) {
	return 43, nil
}
func (m staticBackend) Delete(ctx context.Context, key []byte) (uint64, bool, error) {
	return 43, true, nil
}
func (m staticBackend) WriteIf(ctx context.Context, key, value []byte, a Attrs, del bool, ifIndex uint64) (uint64, error) {
	return 43, nil
}
func (m staticBackend) Writable() error { return nil }
func (m staticBackend) FlushAll(ctx context.Context) (uint64, error) {
	return 43, nil
}
func (m staticBackend) Stats() [][2]string { return nil }

// getRequest returns a backend with n keys of valueLen bytes and a get line
// naming them.
func getRequest(cmd string, n, valueLen int) (staticBackend, []byte) {
	b := staticBackend{}
	var line strings.Builder
	line.WriteString(cmd)
	for i := range n {
		k := fmt.Sprintf("config:service-%d:setting", i)
		b[k] = []byte(strings.Repeat("v", valueLen))
		line.WriteString(" " + k)
	}
	line.WriteString("\r\n")
	return b, []byte(line.String())
}

// benchPipelined serves b.N copies of req on one in-memory connection: the
// server's own cost per request, without sockets.
func benchPipelined(b *testing.B, backend Backend, req []byte) {
	s := New(Config{}, backend, nil)
	defer s.Shutdown(context.Background())
	rc := &repeatConn{req: req, left: b.N}
	c, err := s.register(rc)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	b.ResetTimer()
	c.serve()
	b.StopTimer()
	if rc.left != 0 {
		b.Fatalf("%d requests not served", rc.left)
	}
}

func BenchmarkGet1Key(b *testing.B) {
	backend, req := getRequest("get", 1, 100)
	benchPipelined(b, backend, req)
}

func BenchmarkGet20Keys(b *testing.B) {
	backend, req := getRequest("get", 20, 100)
	benchPipelined(b, backend, req)
}

func BenchmarkGets20Keys(b *testing.B) {
	backend, req := getRequest("gets", 20, 100)
	benchPipelined(b, backend, req)
}

func BenchmarkGet200Keys(b *testing.B) {
	backend, req := getRequest("get", 200, 100)
	benchPipelined(b, backend, req)
}

func BenchmarkGet20KeysMisses(b *testing.B) {
	_, req := getRequest("get", 20, 100)
	benchPipelined(b, staticBackend{}, req)
}

func BenchmarkSet1KiB(b *testing.B) {
	req := []byte("set config:service-1:setting 0 0 1024\r\n" + strings.Repeat("v", 1024) + "\r\n")
	benchPipelined(b, staticBackend{}, req)
}

// BenchmarkSet40KiB is the readlat writers' request.
func BenchmarkSet40KiB(b *testing.B) {
	req := []byte("set rl-0000-1-1-123 0 0 40960\r\n" + strings.Repeat("v", 40960) + "\r\n")
	benchPipelined(b, staticBackend{}, req)
}

// BenchmarkGet20KeysTCP measures request/response round trips over
// loopback TCP, one request in flight.
func BenchmarkGet20KeysTCP(b *testing.B) {
	backend, req := getRequest("get", 20, 100)
	s := New(Config{}, backend, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Shutdown(context.Background())
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	reply := make([]byte, 0, 8192)
	buf := make([]byte, 8192)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		reply = reply[:0]
		for !strings.HasSuffix(string(reply), "END\r\n") {
			n, err := nc.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			reply = append(reply, buf[:n]...)
		}
	}
}

func BenchmarkMetaGet1Key(b *testing.B) {
	backend, _ := getRequest("get", 1, 100)
	benchPipelined(b, backend, []byte("mg config:service-0:setting v c f\r\n"))
}

func BenchmarkBinaryGet1Key(b *testing.B) {
	backend, _ := getRequest("get", 1, 100)
	benchPipelined(b, backend, []byte(binReq(opGetK, "config:service-0:setting", "", "", 0, 1)))
}
