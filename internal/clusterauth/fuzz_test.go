package clusterauth

import (
	"bytes"
	"io"
	"testing"
)

// rw feeds a handshake the peer's bytes and collects what it writes.
type rw struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (r *rw) Read(b []byte) (int, error)  { return r.in.Read(b) }
func (r *rw) Write(b []byte) (int, error) { return r.out.Write(b) }

// FuzzServerHandshake feeds the server side of the keyed handshake
// arbitrary client bytes: it must never accept a client that does not
// hold the key, never read more than MaxPreAuthBytes, and answer nothing
// but its nonce and proof before the client proved itself.
func FuzzServerHandshake(f *testing.F) {
	k := testKey(f, 7).handshakeKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &rw{in: bytes.NewReader(data)}
		claim, err := serverHandshake(c, [][]byte{k})
		if err == nil {
			t.Fatalf("accepted a client without the key (claim %q)", claim)
		}
		if read := len(data) - c.in.Len(); read > MaxPreAuthBytes {
			t.Fatalf("read %d bytes before authentication, limit %d", read, MaxPreAuthBytes)
		}
		if n := c.out.Len(); n != 0 && n != nonceLen+macLen {
			t.Fatalf("wrote %d bytes to an unauthenticated client", n)
		}
	})
}

// FuzzClientHandshake feeds the client side arbitrary server bytes: it
// must never accept a server that does not hold the key.
func FuzzClientHandshake(f *testing.F) {
	k := testKey(f, 7).handshakeKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &rw{in: bytes.NewReader(data)}
		if err := clientHandshake(c, [][]byte{k}, "raft-node/1"); err == nil {
			t.Fatal("accepted a server without the key")
		}
	})
}

// TestHandshakeRoundTrip runs both sides over a pipe, as the fuzz seeds
// are made of.
func TestHandshakeRoundTrip(t *testing.T) {
	k := testKey(t, 7).handshakeKey()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	type res struct {
		claim string
		err   error
	}
	done := make(chan res, 1)
	go func() {
		claim, err := serverHandshake(struct {
			io.Reader
			io.Writer
		}{sr, sw}, [][]byte{k})
		done <- res{claim, err}
	}()
	if err := clientHandshake(struct {
		io.Reader
		io.Writer
	}{cr, cw}, [][]byte{k}, "raft-node/9"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.claim != "raft-node/9" {
		t.Fatalf("server: %q %v", r.claim, r.err)
	}
}
