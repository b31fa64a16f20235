package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// slowConn models a slow network link from the server: it writes at most
// piece bytes every pause, and honours the write deadline as a kernel
// would (a write still blocked past its deadline fails, having sent part).
type slowConn struct {
	net.Conn
	piece int
	pause time.Duration

	mu       sync.Mutex
	deadline time.Time
}

func (c *slowConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *slowConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *slowConn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c.mu.Lock()
		d := c.deadline
		c.mu.Unlock()
		if !d.IsZero() && time.Now().After(d) {
			return n, os.ErrDeadlineExceeded
		}
		k, err := c.Conn.Write(p[n:min(len(p), n+c.piece)])
		n += k
		if err != nil {
			return n, err
		}
		time.Sleep(c.pause)
	}
	return n, nil
}

type slowListener struct {
	net.Listener
	piece int
	pause time.Duration
}

func (l slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, piece: l.piece, pause: l.pause}, nil
}

// An entry whose message takes longer to cross a slow link than the idle
// and write timeouts still arrives, as long as bytes keep flowing: the
// timeouts detect a dead peer, not a slow one. (A per-message deadline
// failed every attempt to move that message, at the same index each time:
// the replica never got past it.) A source that goes silent mid-message
// is still dropped.
func TestSlowLinkLargeEntry(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	// Long enough that a loaded machine's scheduling delays do not look
	// like a dead peer; the entry takes more than twice as long to cross.
	const timeout = 2 * time.Second
	srv, err := NewServer(ServerConfig{Metrics: metricsOf(t), ProcessID: NewProcessID(), ProgressInterval: 50 * time.Millisecond,
		HandshakeTimeout: 2 * time.Second, WriteTimeout: timeout}, func(db string) (*store.Store, bool) {
		return root, db == root.Name()
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	served := make(chan error, 1)
	// About 0.8 MB/s: the 4 MiB entry takes some 5 s to cross.
	go func() { served <- srv.Serve(slowListener{Listener: ln, piece: 16 << 10, pause: 20 * time.Millisecond}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("serve returned %v", err)
		}
	})
	write(t, root, "small", "x")
	write(t, root, "big", strings.Repeat("v", 4<<20))
	write(t, root, "after", "y")

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{ln.Addr().String()}, func(c *ReplicaConfig) {
		c.IdleTimeout = timeout
	})
	waitFor(t, "the replica to get the large entry over the slow link", 2*time.Minute, func() bool {
		return rep.AppliedIndex() >= root.AppliedIndex()
	})
	assertSame(t, root, rep)
	if n := errCount(t, name, kindTimeout) + errCount(t, name, kindIO); n != 0 {
		t.Errorf("%v timeouts or I/O errors on a slow but live link (last error %v)", n, r.State().LastError)
	}
}

// A source that stops in the middle of a message is dropped after the idle
// timeout, like one that goes silent between messages, and nothing of the
// message is applied.
func TestSourceStalledMidMessage(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	good := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "m", 5)

	stalled := fakeSource(t, root.DBID(), func(c net.Conn, h *Hello) error {
		es, err := root.ReadLog(h.LastIndex+1, 100, 1<<20)
		if err != nil || len(es) == 0 {
			t.Errorf("read log: %v", err)
			return err
		}
		frame, err := AppendFrame(nil, &Entries{Entries: es})
		if err != nil {
			t.Error(err)
			return err
		}
		_, err = c.Write(frame[:len(frame)/2])
		return err
	})

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{stalled, good}, func(c *ReplicaConfig) {
		c.IdleTimeout = 200 * time.Millisecond
	})
	waitCaughtUp(t, rep, root)
	assertSame(t, root, rep)
	if n := errCount(t, name, kindTimeout); n < 1 {
		t.Fatalf("no timeout counted for the stalled source (last error %v)", r.State().LastError)
	}
}

// A client that stops reading is dropped after WriteTimeout: the deadline
// covers each piece of a message, and a piece that cannot be written in
// time ends the session, however large the message.
func TestServerDropsClientThatStopsReading(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	for i := range 8 { // more than the socket buffers hold
		write(t, root, fmt.Sprint("big", i), strings.Repeat("v", 1<<20))
	}
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.WriteTimeout = 300 * time.Millisecond })
	c, m := rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID()})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("handshake answered %T %+v", m, m)
	}
	time.Sleep(1500 * time.Millisecond) // read nothing: the server's write blocks
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the server kept the session of a client that read nothing for 1.5s (write timeout 300ms): %v", err)
	}
}
