package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestHTTPGetRequest(t *testing.T) {
	got := string(httpGetRequest("127.0.0.1:7380", "my db", "a/b"))
	want := "GET /v1/my%20db/keys/a%2Fb HTTP/1.1\r\nHost: 127.0.0.1:7380\r\n\r\n"
	if got != want {
		t.Errorf("request %q, want %q", got, want)
	}
}

func TestHTTPGetOneReplies(t *testing.T) {
	for _, tc := range []struct {
		reply  string
		value  string
		found  bool
		kind   string // errKind of the expected error, or ""
		broken bool
	}{
		{reply: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nQs-Index: 7\r\n\r\nabc", value: "abc", found: true},
		{reply: "HTTP/1.1 200 OK\r\ncontent-length:0\r\n\r\n", value: "", found: true},
		{reply: "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}"},
		{reply: "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 7\r\n\r\n{\"x\":1}", kind: "http_500"},
		{reply: "HTTP/1.1 200 OK\r\n\r\nabc", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", kind: "protocol", broken: true},
		{reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", kind: "io", broken: true},
		{reply: "", kind: "io", broken: true},
	} {
		c, sc := scripted(tc.reply)
		req := httpGetRequest("h", "db", "k")
		v, found, err := c.httpGetOne(req)
		if sc.sent.String() != string(req) {
			t.Fatalf("sent %q", sc.sent.String())
		}
		name := strings.ReplaceAll(tc.reply, "\r\n", "⏎")
		if tc.kind != "" {
			if err == nil || errKind(err) != tc.kind {
				t.Errorf("%q: err %v (kind %s), want kind %s", name, err, kindOf(err), tc.kind)
			}
		} else if err != nil {
			t.Errorf("%q: %v", name, err)
		} else if string(v) != tc.value || found != tc.found {
			t.Errorf("%q: got %q found=%v", name, v, found)
		}
		if c.broken != tc.broken {
			t.Errorf("%q: broken = %v", name, c.broken)
		}
	}
}

// TestReadLatViaHTTP: the reader reads through the HTTP API, in both
// reader modes; a target without an HTTP address is skipped.
func TestReadLatViaHTTP(t *testing.T) {
	forReaders(t, func(t *testing.T, reader string) {
		defer checkNoLeaks(t)
		a := newFakeTarget(t, "a", true)
		b := newFakeTarget(t, "b", false)
		cfg := testConfig()
		cfg.ReadLatReader = reader
		cfg.ReadLatVia = ReadViaHTTP
		res, err := ReadLat(context.Background(), cfg, []*Target{a.t, b.t}, testLogf(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Phases) != len(cfg.ReadLatWriters) {
			t.Fatalf("%d phases, want %d (target b skipped)", len(res.Phases), len(cfg.ReadLatWriters))
		}
		for _, ph := range res.Phases {
			if ph.Target != "a" {
				t.Errorf("phase %s ran on %s, which has no HTTP address", ph.Name, ph.Target)
			}
			if ph.Errors != 0 {
				t.Errorf("%s: %d errors: %v (%s)", ph.Name, ph.Errors, ph.ErrorKinds, ph.FirstError)
			}
			checkOp(t, &ph, "read")
		}
		if a.st.httpGets.Load() == 0 {
			t.Error("the reader did not read through HTTP")
		}
		if !strings.Contains(res.Description, "through the HTTP API") {
			t.Errorf("description %q", res.Description)
		}
	})
}

// TestReadLatViaHTTPMiss: a key the server does not have (404) is a miss.
func TestReadLatViaHTTPMiss(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true)
	cfg := testConfig()
	cfg.ReadLatVia = ReadViaHTTP
	cfg.ReadLatWriters = []int{0}
	cfg.DB = "other" // the fake serves only "default": every read is a 404
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if ph := res.Phases[0]; ph.ErrorKinds["miss"] == 0 {
		t.Errorf("errors %v, want misses", ph.ErrorKinds)
	}
}

func FuzzHTTPGetReply(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nQs-Index: 7\r\n\r\nabc",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 7\r\n\r\n{\"x\":1}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	req := httpGetRequest("h", "db", "k")
	f.Fuzz(func(t *testing.T, reply []byte) {
		c, _ := scripted(string(reply))
		v, found, err := c.httpGetOne(req)
		if len(v) > len(reply) {
			t.Fatalf("a %d-byte value from a %d-byte reply", len(v), len(reply))
		}
		if err == nil && !found && v != nil {
			t.Fatalf("a miss with a value %q", v)
		}
		var he *HTTPError
		if err != nil && !c.broken && !errors.As(err, &he) {
			t.Fatalf("error %v left the connection usable", err)
		}
	})
}

// TestGetViaHTTP: with GetVia http, a target with an HTTP address answers
// its single gets through it and its multi-gets through memcache; one
// without (the baseline) answers both through memcache, so the ratio
// compares the two.
func TestGetViaHTTP(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true)
	b := newFakeTarget(t, "b", false)
	b.t.Baseline = true
	cfg := testConfig()
	cfg.GetVia = ReadViaHTTP
	res, err := Get(context.Background(), cfg, []*Target{a.t, b.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 {
		t.Fatalf("got %d phases: %+v", len(res.Phases), res.Phases)
	}
	for _, ph := range res.Phases {
		if ph.Errors != 0 {
			t.Errorf("%s: %d errors: %v (%s)", ph.Target, ph.Errors, ph.ErrorKinds, ph.FirstError)
		}
		checkOp(t, &ph, "get")
		checkOp(t, &ph, "mget")
	}
	g := checkOp(t, &res.Phases[0], "get")
	if n := a.st.httpGets.Load(); n < g.Ops {
		t.Errorf("a answered %d HTTP gets for %d single gets", n, g.Ops)
	}
	if n := b.st.httpGets.Load(); n != 0 {
		t.Errorf("b, without an HTTP address, answered %d HTTP gets", n)
	}
	if len(res.Ratios) != 2 {
		t.Errorf("got ratios %+v, want get and mget", res.Ratios)
	}
	if !strings.Contains(res.Description, "through the HTTP API") {
		t.Errorf("description %q", res.Description)
	}
}
