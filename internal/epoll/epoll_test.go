package epoll

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// waitFor calls Wait until it reports id (or a wake-up, if id is 0).
func waitFor(t *testing.T, s *Set, id uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ids, woken, err := s.Wait(nil, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if id == 0 && woken {
			return
		}
		for _, got := range ids {
			if got == id {
				return
			}
		}
	}
	t.Fatalf("Wait never reported %d", id)
}

func TestSet(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := New(1); err != ErrUnsupported {
			t.Fatalf("New: %v, want ErrUnsupported", err)
		}
		t.Skip("epoll is Linux only")
	}
	s, err := New(4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv, cli := pair(t)
	fd, ok := FD(srv)
	if !ok {
		t.Fatal("FD of a TCP connection: false")
	}
	if err := s.Add(fd, 0); err == nil {
		t.Error("Add with the reserved identifier 0 succeeded")
	}
	const id = 1<<40 + 7 // both halves of the event's data
	if err := s.Add(fd, id); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := Read(fd, buf); err != ErrWouldBlock {
		t.Fatalf("Read with no input: %v, want ErrWouldBlock", err)
	}
	cli.Write([]byte("hello"))
	waitFor(t, s, id)
	// Level-triggered: input left unread is reported again.
	if n, err := Read(fd, buf[:2]); n != 2 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
	waitFor(t, s, id)
	if n, err := Read(fd, buf); n != 3 || err != nil || string(buf[:3]) != "llo" {
		t.Fatalf("Read: %d %q, %v", n, buf[:n], err)
	}
	if n, err := Write(fd, []byte("back")); n != 4 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	got := make([]byte, 4)
	cli.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := cli.Read(got); err != nil || string(got) != "back" {
		t.Fatalf("client read %q, %v", got, err)
	}

	// Wake from another goroutine ends a Wait with no timeout.
	go s.Wake()
	waitFor(t, s, 0)

	// A full send buffer: Write returns what it wrote and ErrWouldBlock.
	big := make([]byte, 64<<20)
	n, err := Write(fd, big)
	if err != ErrWouldBlock || n <= 0 || n >= len(big) {
		t.Fatalf("Write of 64 MiB to a reader that does not read: %d, %v", n, err)
	}

	// The peer's close: reported, and Read says end of input.
	if err := s.Remove(fd); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(fd); err == nil {
		t.Error("second Remove succeeded")
	}
	if err := s.Add(fd, id); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	waitFor(t, s, id)
	for {
		n, err := Read(fd, buf)
		if err != nil {
			// A reset (the client closed with our data unread) is an
			// error, not the end of input.
			break
		}
		if n == 0 {
			break
		}
	}
}

func TestFDOfNonSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := FD(a); ok {
		t.Error("FD of a net.Pipe end: true")
	}
}

// TestDetach: the detached descriptor serves the connection, the net.Conn
// is closed, and Poll waits for input, returns at a timeout and when the
// socket is shut down.
func TestDetach(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	server, client := pair(t)
	fd, err := Detach(server)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	if err := server.SetReadDeadline(time.Time{}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("net.Conn after Detach: %v, want it closed", err)
	}
	buf := make([]byte, 16)
	if _, err := Read(fd, buf); err != ErrWouldBlock {
		t.Fatalf("Read with nothing sent: %v, want ErrWouldBlock", err)
	}
	if err := Poll(fd, false, 10); err != nil { // nothing comes: a timeout
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Poll(fd, false, -1) }()
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := Read(fd, buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read %q, %v", buf[:n], err)
	}
	if n, err := Write(fd, []byte("back")); n != 4 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "back" {
		t.Fatalf("client read %q, %v", got, err)
	}
	// A shutdown ends a Poll without a deadline: how a waiting goroutine
	// is woken.
	go func() { done <- Poll(fd, false, -1) }()
	time.Sleep(10 * time.Millisecond)
	if err := Shutdown(fd, true, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Poll did not return after a shutdown")
	}
	if n, err := Read(fd, buf); n != 0 || err != nil {
		t.Fatalf("Read after shutdown: %d, %v, want the end of the input", n, err)
	}
}

func TestDetachNonSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := Detach(a); err != ErrUnsupported {
		t.Fatalf("Detach of a net.Pipe end: %v, want ErrUnsupported", err)
	}
	go a.Write([]byte("x")) // still open
	if _, err := b.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}
