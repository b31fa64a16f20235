package bench

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// scriptConn is a net.Conn that answers with a fixed script and records
// what the client sent.
type scriptConn struct {
	r    io.Reader
	sent bytes.Buffer
}

func (c *scriptConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *scriptConn) Write(b []byte) (int, error)      { return c.sent.Write(b) }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

func scripted(reply string) (*mcConn, *scriptConn) {
	sc := &scriptConn{r: strings.NewReader(reply)}
	return newMCConn(sc), sc
}

func TestGetOneReplies(t *testing.T) {
	for _, tc := range []struct {
		reply  string
		value  string // "" with found false: a miss
		kind   string // errKind of the expected error, or ""
		broken bool
	}{
		{reply: "VALUE k 0 3\r\nabc\r\nEND\r\n", value: "abc"},
		{reply: "VALUE k 4294967295 3 18446744073709551615\r\nabc\r\nEND\r\n", value: "abc"},
		{reply: "VALUE k 0 0\r\n\r\nEND\r\n", value: ""},
		{reply: "END\r\n"},
		{reply: "VALUE x 0 3\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 4\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 2\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "END\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 -3\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 99999999999\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 3 1 2\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k x 3\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 4294967296 3\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k  0 3\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 3\r\nabc\r\nVALUE k 0 3\r\nabc\r\nEND\r\n", kind: "protocol", broken: true},
		{reply: "SERVER_ERROR out of memory\r\n", kind: "server_error"},
		{reply: "CLIENT_ERROR bad\r\n", kind: "client_error"},
		{reply: "ERROR\r\n", kind: "error"},
		{reply: "ERRORS\r\n", kind: "protocol", broken: true},
		{reply: "HELLO\r\n", kind: "protocol", broken: true},
		{reply: "VALUE k 0 3\r\nab", kind: "io", broken: true},
		{reply: "", kind: "io", broken: true},
		{reply: strings.Repeat("x", mcBufSize+10) + "\r\n", kind: "protocol", broken: true},
	} {
		c, sc := scripted(tc.reply)
		v, found, err := c.getOne("k")
		if sc.sent.String() != "get k\r\n" {
			t.Fatalf("sent %q", sc.sent.String())
		}
		name := strings.ReplaceAll(tc.reply, "\r\n", "⏎")
		if len(name) > 60 {
			name = name[:60]
		}
		if tc.kind != "" {
			if err == nil || errKind(err) != tc.kind {
				t.Errorf("%q: err %v (kind %s), want kind %s", name, err, kindOf(err), tc.kind)
			}
		} else if err != nil {
			t.Errorf("%q: %v", name, err)
		} else if string(v) != tc.value || found != (tc.reply != "END\r\n") {
			t.Errorf("%q: got %q found=%v", name, v, found)
		}
		if c.broken != tc.broken {
			t.Errorf("%q: broken = %v", name, c.broken)
		}
	}
}

func kindOf(err error) string {
	if err == nil {
		return "none"
	}
	return errKind(err)
}

func TestGetMulti(t *testing.T) {
	keys := []string{"a", "b", "c"}
	c, sc := scripted("VALUE a 0 1\r\n1\r\nVALUE c 0 2\r\n33\r\nEND\r\n")
	got := map[int]string{}
	hits, err := c.get(keys, func(i int, v []byte) { got[i] = string(v) })
	if err != nil || hits != 2 || got[0] != "1" || got[2] != "33" || len(got) != 2 {
		t.Errorf("hits %d err %v got %v", hits, err, got)
	}
	if sc.sent.String() != "get a b c\r\n" {
		t.Errorf("sent %q", sc.sent.String())
	}
	// Out of request order is accepted, a key not asked for is not, nor
	// more values than keys.
	c, _ = scripted("VALUE c 0 1\r\n3\r\nVALUE a 0 1\r\n1\r\nEND\r\n")
	if hits, err := c.get(keys, func(int, []byte) {}); err != nil || hits != 2 {
		t.Errorf("out of order: hits %d err %v", hits, err)
	}
	c, _ = scripted("VALUE a 0 1\r\n1\r\nVALUE z 0 1\r\n1\r\nEND\r\n")
	if _, err := c.get(keys, func(int, []byte) {}); !errors.Is(err, ErrProtocol) || !c.broken {
		t.Errorf("unrequested key: err %v broken %v", err, c.broken)
	}
	c, _ = scripted(strings.Repeat("VALUE a 0 1\r\n1\r\n", 4) + "END\r\n")
	if _, err := c.get(keys, func(int, []byte) {}); !errors.Is(err, ErrProtocol) {
		t.Errorf("too many values: err %v", err)
	}
	c, _ = scripted("SERVER_ERROR busy\r\n")
	if hits, err := c.get(keys, func(int, []byte) {}); errKind(err) != "server_error" || hits != 0 || c.broken {
		t.Errorf("error reply: hits %d err %v broken %v", hits, err, c.broken)
	}
	c, _ = scripted("VALUE a 0 1\r\n1\r\nSERVER_ERROR busy\r\n")
	if hits, err := c.get(keys, func(int, []byte) {}); errKind(err) != "server_error" || hits != 1 || !c.broken {
		t.Errorf("error mid-reply: hits %d err %v broken %v", hits, err, c.broken)
	}
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		reply  string
		kind   string
		broken bool
	}{
		{reply: "STORED\r\n"},
		{reply: "SERVER_ERROR out of memory storing object\r\n", kind: "server_error"},
		{reply: "NOT_STORED\r\n", kind: "not_stored"},
		{reply: "CLIENT_ERROR bad data chunk\r\n", kind: "client_error", broken: true},
		{reply: "ERROR\r\n", kind: "error", broken: true},
		{reply: "STORED?\r\n", kind: "protocol", broken: true},
		{reply: "STOR", kind: "io", broken: true},
	} {
		c, sc := scripted(tc.reply)
		err := c.set("k", []byte("abc"))
		if sc.sent.String() != "set k 0 0 3\r\nabc\r\n" {
			t.Fatalf("sent %q", sc.sent.String())
		}
		if kindOf(err) != tc.kind && !(tc.kind == "" && err == nil) {
			t.Errorf("%q: err %v, want kind %q", tc.reply, err, tc.kind)
		}
		if c.broken != tc.broken {
			t.Errorf("%q: broken = %v", tc.reply, c.broken)
		}
	}
	c, sc := scripted("STORED\r\nSERVER_ERROR full\r\nSTORED\r\n")
	err := c.setMany([]string{"a", "b", "c"}, [][]byte{{'1'}, {'2'}, {'3'}})
	if errKind(err) != "server_error" || c.broken {
		t.Errorf("setMany: err %v broken %v", err, c.broken)
	}
	if want := "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nset c 0 0 1\r\n3\r\n"; sc.sent.String() != want {
		t.Errorf("setMany sent %q", sc.sent.String())
	}
}

func TestVersion(t *testing.T) {
	c, _ := scripted("VERSION 1.6.18\r\n")
	if v, err := c.version(); err != nil || v != "1.6.18" {
		t.Errorf("got %q %v", v, err)
	}
	c, _ = scripted("ERROR\r\n")
	if _, err := c.version(); errKind(err) != "error" {
		t.Errorf("got %v", err)
	}
}

func FuzzGetReply(f *testing.F) {
	for _, s := range []string{
		"VALUE a 0 1\r\n1\r\nVALUE c 0 2 7\r\n33\r\nEND\r\n",
		"END\r\n",
		"SERVER_ERROR x\r\n",
		"VALUE a 0 1\r\n1\r\nVALUE a 0 1\r\n1\r\nEND\r\n",
		"VALUE b 0 18446744073709551616\r\n",
	} {
		f.Add([]byte(s))
	}
	keys := []string{"a", "b", "c"}
	f.Fuzz(func(t *testing.T, reply []byte) {
		c, _ := scripted(string(reply))
		total := 0
		hits, err := c.get(keys, func(i int, v []byte) {
			if i < 0 || i >= len(keys) {
				t.Fatalf("index %d", i)
			}
			total += len(v)
		})
		if hits > len(keys) || total > len(reply) {
			t.Fatalf("hits %d, %d value bytes from a %d-byte reply", hits, total, len(reply))
		}
		var re *ReplyError
		if err != nil && !c.broken && (hits > 0 || !errors.As(err, &re)) {
			t.Fatalf("error %v after %d values left the connection usable", err, hits)
		}
		c, _ = scripted(string(reply))
		v, found, err := c.getOne("a")
		if err == nil && found && len(v) > len(reply) {
			t.Fatalf("value longer than the reply")
		}
	})
}
