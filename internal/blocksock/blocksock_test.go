//go:build linux

package blocksock

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns a blocking Sock on one end of a loopback TCP connection and
// the other end as it is.
func pair(t *testing.T) (*Sock, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s, peer
}

func soon() time.Time { return time.Now().Add(5 * time.Second) }

func TestRoundTrip(t *testing.T) {
	s, peer := pair(t)
	if n, err := s.Write([]byte("ping"), soon()); n != 4 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	buf := make([]byte, 4)
	peer.SetDeadline(soon())
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	peer.Write([]byte("pong"))
	n, err := s.Read(buf, soon())
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

func TestReadDeadline(t *testing.T) {
	s, _ := pair(t)
	start := time.Now()
	_, err := s.Read(make([]byte, 8), time.Now().Add(50*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with nothing to read: %v, want a deadline error", err)
	}
	if took < 40*time.Millisecond || took > 30*time.Second {
		t.Fatalf("the 50 ms read timeout took %v", took)
	}
	if _, err := s.Read(make([]byte, 8), time.Now().Add(-time.Second)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	if _, err := s.Write([]byte("x"), time.Now().Add(-time.Second)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v", err)
	}
}

// TestWriteDeadline fills the socket buffers of a peer that never reads.
func TestWriteDeadline(t *testing.T) {
	s, _ := pair(t)
	big := make([]byte, 64<<20)
	start := time.Now()
	n, err := s.Write(big, time.Now().Add(200*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == len(big) {
		t.Fatalf("write of 64 MiB to a peer that does not read: %d bytes, %v", n, err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the 200 ms write timeout took %v", took)
	}
}

// TestAbortEndsABlockedRead: the read would wait 10 s for data that never
// comes; Abort from another goroutine ends it at once.
func TestAbortEndsABlockedRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stop    func(*Sock)
		wantEOF bool
	}{{"Abort", (*Sock).Abort, false}, {"CloseRead", (*Sock).CloseRead, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := pair(t)
			done := make(chan error, 1)
			go func() {
				_, err := s.Read(make([]byte, 8), time.Now().Add(5*time.Minute))
				done <- err
			}()
			time.Sleep(50 * time.Millisecond) // let it block
			tc.stop(s)
			select {
			case err := <-done:
				if tc.wantEOF && err != io.EOF {
					t.Fatalf("read after %s: %v, want io.EOF", tc.name, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("read still blocked 60s after %s", tc.name)
			}
		})
	}
}

func TestPeerGone(t *testing.T) {
	s, peer := pair(t)
	peer.Close()
	if _, err := s.Read(make([]byte, 8), soon()); err != io.EOF {
		t.Fatalf("read from a closed peer: %v, want io.EOF", err)
	}
	// The first write may still be accepted by the kernel; a later one
	// fails with EPIPE or ECONNRESET, and no SIGPIPE kills the test.
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = s.Write([]byte("x"), soon())
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
}

func TestNewRefusesWhatIsNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := New(a); err == nil {
		t.Fatal("New accepted a net.Pipe")
	}
}

// TestReadWriteDoNotAllocate: the calls run once per request on the read
// path of the memcached front door.
func TestReadWriteDoNotAllocate(t *testing.T) {
	s, peer := pair(t)
	go io.Copy(peer, peer) // echo
	msg := []byte("get k\r\n")
	buf := make([]byte, 64)
	deadline := soon()
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := s.Write(msg, deadline); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < len(msg) {
			n, err := s.Read(buf[got:], deadline)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per write and read", allocs)
	}
}
