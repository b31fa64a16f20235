package clusterauth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func testKey(t testing.TB, b byte) Key {
	k, err := ParseKey(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// echoServer serves a.Listener on loopback: each connection's peer is
// sent on peers, then what the client sends is echoed.
func echoServer(t *testing.T, a *Auth, port string, maxConns int) (net.Listener, chan Peer, chan error) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := a.Listener(raw, port, maxConns)
	t.Cleanup(func() { ln.Close() })
	peers, errs := make(chan Peer, 16), make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				p, err := PeerOf(c)
				if err != nil {
					errs <- err
					return
				}
				peers <- p
				io.Copy(c, c)
			}()
		}
	}()
	return ln, peers, errs
}

func waitPeer(t *testing.T, peers chan Peer, errs chan error) (Peer, error) {
	t.Helper()
	select {
	case p := <-peers:
		return p, nil
	case err := <-errs:
		return Peer{}, err
	case <-time.After(30 * time.Second):
		t.Fatal("no connection reached the server")
	}
	return Peer{}, nil
}

func echo(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "ping" {
		t.Fatalf("echo: %q %v", b, err)
	}
}

func TestClusterKeyAuthenticatesBothWays(t *testing.T) {
	a := New(Options{Key: testKey(t, 1)})
	if !a.Authenticated() || a.Mode() != "cluster-key" {
		t.Fatalf("mode %s", a.Mode())
	}
	ln, peers, errs := echoServer(t, a, "t-key-ok", 0)
	c, err := a.Dialer(RaftClaim(2))(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c)
	p, err := waitPeer(t, peers, errs)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Authenticated || !p.Has("raft-node/2") || p.Has("raft-node/1") {
		t.Fatalf("peer %+v", p)
	}
	if n := testutil.ToFloat64(a.m.handshakes.WithLabelValues("t-key-ok", resultOK)); n != 1 {
		t.Fatalf("ok handshakes %v, want 1", n)
	}
}

func TestWrongClusterKeyRefusedAndCounted(t *testing.T) {
	ln, _, errs := echoServer(t, New(Options{Key: testKey(t, 1)}), "t-key-bad", 0)
	_, err := New(Options{Key: testKey(t, 2)}).Dialer("")(context.Background(), "tcp", ln.Addr().String())
	if !errors.Is(err, ErrBadKey) {
		t.Fatalf("dial with another key: %v, want ErrBadKey (the client checks the server's proof first)", err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrBadKey) {
			t.Fatalf("server: %v, want ErrBadKey", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not end the handshake")
	}
	waitCount(t, ln, resultBadKey, 1)

	// A client that forges the client MAC (it cannot check the server's
	// proof, so it goes on) is refused by the server and counted.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write(append([]byte(keyMagic), make([]byte, nonceLen)...))
	var resp [nonceLen + macLen]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		t.Fatal(err)
	}
	c.Write(append(make([]byte, macLen), 0))
	if n, err := c.Read(resp[:]); err == nil {
		t.Fatalf("server answered %d bytes to a forged MAC", n)
	}
	waitCount(t, ln, resultBadKey, 2)
}

// waitCount waits until the handshakes of result counted by the Auth of
// ln, on its port, reach want.
func waitCount(t *testing.T, ln net.Listener, result string, want float64) {
	t.Helper()
	l := ln.(*listener)
	for deadline := time.Now().Add(30 * time.Second); ; {
		n := testutil.ToFloat64(l.a.m.handshakes.WithLabelValues(l.port, result))
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("handshakes{port=%s,result=%s} = %v, want %v", l.port, result, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKeyedServerRefusesPlainProtocol(t *testing.T) {
	ln, _, _ := echoServer(t, New(Options{Key: testKey(t, 1)}), "t-not-keyed", 0)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	// A replication hello frame, as an unauthenticated client sends it.
	c.Write([]byte("\x01\x00\x00\x00\x20QSR1\x00\x02 and some more bytes of hello...."))
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("server answered %q to an unkeyed client", b)
	}
	waitCount(t, ln, resultNotKeyed, 1)
}

func TestPlainClientOfKeyedServerGetsClearError(t *testing.T) {
	ln, _, _ := echoServer(t, New(Options{Key: testKey(t, 1)}), "t-plain-client", 0)
	// A keyed client of a server without the key: the server echoes the
	// client's hello, which is no valid proof.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	go func() {
		c, err := raw.Accept()
		if err == nil {
			c.Close()
		}
	}()
	_, err = New(Options{Key: testKey(t, 1)}).Dialer("")(context.Background(), "tcp", raw.Addr().String())
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("dial a server that closes: %v, want ErrRefused", err)
	}
	_ = ln
}

func TestHandshakeDeadlineClosesSilentPeer(t *testing.T) {
	a := New(Options{Key: testKey(t, 1), HandshakeTimeout: 50 * time.Millisecond})
	ln, _, _ := echoServer(t, a, "t-silent", 0)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("server sent data to a silent peer")
	}
	waitCount(t, ln, resultTimeout, 1)
}

func TestListenerCapsConnections(t *testing.T) {
	ln, peers, errs := echoServer(t, New(Options{Key: testKey(t, 1)}), "t-cap", 2)
	l := ln.(*listener)
	dial := New(Options{Key: testKey(t, 1)}).Dialer("")
	var conns []net.Conn
	for range 2 {
		c, err := dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := waitPeer(t, peers, errs); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The third is closed at accept, before any handshake.
	if _, err := dial(context.Background(), "tcp", ln.Addr().String()); err == nil {
		t.Fatal("a third connection was served over the cap of 2")
	}
	waitCount(t, ln, resultConnLimit, 1)
	if n := l.Open(); n != 2 {
		t.Fatalf("%d connections open, want 2", n)
	}
	// Closing one makes room.
	conns[0].Close()
	for deadline := time.Now().Add(30 * time.Second); l.Open() > 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open after one closed", l.Open())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestCheckListen(t *testing.T) {
	none := New(Options{})
	if _, err := none.CheckListen([]string{"127.0.0.1:7390", "localhost:1", "[::1]:2"}, false); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	for _, addr := range []string{"0.0.0.0:7390", ":7390", "10.1.2.3:7390", "example.com:7390"} {
		if _, err := none.CheckListen([]string{"127.0.0.1:1", addr}, false); !errors.Is(err, ErrInsecure) {
			t.Fatalf("%s without auth: %v, want ErrInsecure", addr, err)
		}
		open, err := none.CheckListen([]string{addr}, true)
		if err != nil || len(open) != 1 {
			t.Fatalf("%s with insecure: %v %v", addr, open, err)
		}
		if _, err := New(Options{Key: testKey(t, 1)}).CheckListen([]string{addr}, false); err != nil {
			t.Fatalf("%s with a key: %v", addr, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	hex64 := "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"
	if k, err := LoadKey(write("hex", hex64)); err != nil || len(k.secret) != 32 {
		t.Fatalf("hex key: %v", err)
	}
	if _, err := LoadKey(write("short", "00112233\n")); !errors.Is(err, ErrWeakKey) {
		t.Fatalf("short key: %v", err)
	}
	if _, err := LoadKey(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing key file accepted")
	}
	a, b := testKey(t, 1), testKey(t, 2)
	if bytes.Equal(a.GossipKey(), b.GossipKey()) || len(a.GossipKey()) != 32 {
		t.Fatal("gossip keys of different cluster keys are equal, or not 32 bytes")
	}
	if bytes.Equal(a.GossipKey(), a.handshakeKey()) {
		t.Fatal("gossip and handshake keys are the same")
	}
}

// Derive gives each use its own key, the same for the same key file.
func TestKeyDerive(t *testing.T) {
	k1, err := ParseKey(bytes.Repeat([]byte{1}, MinKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := ParseKey(bytes.Repeat([]byte{2}, MinKeyBytes))
	g := k1.Derive("gossip")
	if len(g) != 32 || bytes.Equal(g, k1.Derive("other")) || bytes.Equal(g, k2.Derive("gossip")) || !bytes.Equal(g, k1.Derive("gossip")) {
		t.Fatal("derived keys are not one per use and per cluster key")
	}
}

// TestRefusedOr: a close by the server, seen as EOF or as a reset (read
// or write), is a refusal; other errors are passed on.
func TestRefusedOr(t *testing.T) {
	for _, err := range []error{io.EOF, io.ErrUnexpectedEOF,
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}} {
		if got := refusedOr(err); got != ErrRefused {
			t.Errorf("refusedOr(%v) = %v, want ErrRefused", err, got)
		}
	}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	if got := refusedOr(timeout); got != timeout {
		t.Errorf("refusedOr(%v) = %v, want it unchanged", timeout, got)
	}
}
