package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// ErrFetchConnClosed: the fetch connection broke or was closed; requests
// in flight on it fail with an error wrapping it.
var ErrFetchConnClosed = errors.New("qs: fetch connection closed")

// ErrFetchConnClosedLocally: Close was called on the connection (by this
// process, not because it broke); it wraps ErrFetchConnClosed.
var ErrFetchConnClosedLocally = fmt.Errorf("%w by this process", ErrFetchConnClosed)

// FetchConn is the client side of one fetch connection. Any number of
// goroutines may call Fetch at once: requests are written one at a time
// and pipelined, and a reader goroutine (owned by the connection, ended
// by Close) hands each answer to its request by id.
type FetchConn struct {
	c       net.Conn
	Welcome Welcome
	// Node is the server's node name, on an L2 connection.
	Node string
	in   *progressReader

	wmu  sync.Mutex // serializes request writes
	wbuf []byte

	mu struct {
		sync.Mutex
		nextID  uint64
		pending map[uint64]chan *Values
		err     error
	}
	done    chan struct{} // closed when the connection is broken or closed
	stopped chan struct{} // closed when the reader returned
}

// FetchHello is what a fetch client says about itself.
type FetchHello struct {
	Database  string
	DBID      store.DBID
	ProcessID ProcessID
	// Shard opens an L2 connection to a proxy of the same data centre
	// (protocol_shard.go) instead of a fetch connection.
	Shard bool
}

// DialFetch opens a fetch connection to addr (an L2 connection with
// h.Shard) and completes the handshake. A fetch connection is asked for
// at QuietVersion; a server of an older version refuses it with code
// "version", and DialFetch then opens one at FetchVersion, on which
// FetchQuiet sends plain fetches. An L2 connection is of FetchVersion.
func DialFetch(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string, h FetchHello) (*FetchConn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	if h.Shard {
		return dialFetch(ctx, dial, addr, h, FetchVersion)
	}
	fc, err := dialFetch(ctx, dial, addr, h, QuietVersion)
	if re := (*RefusedError)(nil); errors.As(err, &re) && re.Code == RefuseVersion {
		return dialFetch(ctx, dial, addr, h, FetchVersion)
	}
	return fc, err
}

func dialFetch(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string, h FetchHello, version uint16) (*FetchConn, error) {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// A context without a deadline still ends the handshake when it ends.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	hello := &Hello{Version: version, Fetch: !h.Shard, Shard: h.Shard, Database: h.Database, DBID: h.DBID, ProcessID: h.ProcessID}
	if err := WriteMessage(c, hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("send fetch hello: %w", err)
	}
	in := &progressReader{c: c}
	br := bufio.NewReaderSize(in, 64<<10)
	m, err := ReadMessage(br)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("fetch handshake: %w", err)
	}
	var w *Welcome
	switch m := m.(type) {
	case *Welcome:
		w = m
	case *Refuse:
		c.Close()
		return nil, &RefusedError{Code: m.Code, Reason: m.Reason}
	default:
		c.Close()
		return nil, fmt.Errorf("%w: fetch hello answered with %s", ErrMalformed, m.Type())
	}
	if !h.DBID.IsZero() && w.DBID != h.DBID {
		c.Close()
		return nil, &RefusedError{Code: RefuseWrongDBID, Reason: fmt.Sprintf("%s serves database id %s, want %s", addr, w.DBID, h.DBID)}
	}
	var node string
	if h.Shard {
		m, err := ReadMessage(br)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("L2 handshake: %w", err)
		}
		n, ok := m.(*Node)
		if !ok {
			c.Close()
			return nil, fmt.Errorf("%w: L2 welcome followed by %s, want node", ErrMalformed, m.Type())
		}
		node = n.Name
	}
	c.SetDeadline(time.Time{})
	fc := &FetchConn{c: c, Welcome: *w, Node: node, in: in, done: make(chan struct{}), stopped: make(chan struct{})}
	fc.mu.pending = map[uint64]chan *Values{}
	go fc.read(br)
	return fc, nil
}

// Done is closed once the connection can take no more requests.
func (fc *FetchConn) Done() <-chan struct{} { return fc.done }

// Err is why the connection ended (nil while it works).
func (fc *FetchConn) Err() error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.mu.err
}

// LastRead is when bytes last arrived on the connection (the handshake's
// included): a caller waiting on an answer tells a member that is sending
// (this answer or those queued before it) from one that stalled.
func (fc *FetchConn) LastRead() time.Time { return time.Unix(0, fc.in.last.Load()) }

// progressReader notes when bytes last arrived.
type progressReader struct {
	c    net.Conn
	last atomic.Int64 // unix ns
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	if n > 0 {
		r.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// Close ends the connection and waits for its reader. Requests in flight
// on it fail with ErrFetchConnClosedLocally.
func (fc *FetchConn) Close() error {
	fc.fail(ErrFetchConnClosedLocally)
	<-fc.stopped
	return nil
}

// fail breaks the connection once: pending requests get err.
func (fc *FetchConn) fail(err error) {
	fc.mu.Lock()
	if fc.mu.err != nil {
		fc.mu.Unlock()
		return
	}
	fc.mu.err = err
	fc.mu.pending = nil
	fc.mu.Unlock()
	close(fc.done)
	fc.c.Close()
}

func (fc *FetchConn) read(br *bufio.Reader) {
	defer close(fc.stopped)
	for {
		m, err := ReadMessage(br)
		if err != nil {
			fc.fail(fmt.Errorf("%w: %v", ErrFetchConnClosed, err))
			return
		}
		switch m := m.(type) {
		case *Values:
			fc.mu.Lock()
			ch := fc.mu.pending[m.ID]
			delete(fc.mu.pending, m.ID)
			fc.mu.Unlock()
			if ch != nil {
				ch <- m // buffered: never blocks
			}
		case *Refuse:
			fc.fail(fmt.Errorf("%w: %w", ErrFetchConnClosed, &RefusedError{Code: m.Code, Reason: m.Reason}))
			return
		default:
			fc.fail(fmt.Errorf("%w: %w: unexpected %s on a fetch connection", ErrFetchConnClosed, ErrMalformed, m.Type()))
			return
		}
	}
}

// Fetch sends one request and waits for its answer, ctx, or the
// connection's end. An answer that arrives after ctx ended is dropped.
func (fc *FetchConn) Fetch(ctx context.Context, asOf uint64, keys []FetchKey) (*Values, error) {
	return fc.fetch(ctx, &Fetch{AsOf: asOf, Items: keys})
}

// FetchQuiet is Fetch for values nobody read (a shard warm-up's): a relay
// answers it without publishing the values on its prefetch stream. A
// server older than QuietVersion (Quiet reports false) is sent a plain
// Fetch, whose values a relay publishes.
func (fc *FetchConn) FetchQuiet(ctx context.Context, asOf uint64, keys []FetchKey) (*Values, error) {
	m := &Fetch{AsOf: asOf, Items: keys}
	if fc.Quiet() {
		m.Flags = FetchQuiet
	}
	return fc.fetch(ctx, m)
}

// Quiet reports whether the server takes quiet fetches on this
// connection: one of QuietVersion or later (never an L2 connection,
// which is of FetchVersion).
func (fc *FetchConn) Quiet() bool { return fc.Welcome.Version >= QuietVersion }

// fetch sends m, with the next id, and waits for its answer.
func (fc *FetchConn) fetch(ctx context.Context, m *Fetch) (*Values, error) {
	keys := m.Items
	ch := make(chan *Values, 1)
	fc.mu.Lock()
	if fc.mu.err != nil {
		err := fc.mu.err
		fc.mu.Unlock()
		return nil, err
	}
	fc.mu.nextID++
	id := fc.mu.nextID
	fc.mu.pending[id] = ch
	fc.mu.Unlock()
	forget := func() {
		fc.mu.Lock()
		delete(fc.mu.pending, id)
		fc.mu.Unlock()
	}

	fc.wmu.Lock()
	var err error
	m.ID = id
	fc.wbuf, err = AppendFrame(fc.wbuf[:0], m)
	if err == nil {
		dl := time.Now().Add(10 * time.Second)
		if d, ok := ctx.Deadline(); ok {
			dl = d
		}
		fc.c.SetWriteDeadline(dl)
		if _, err = fc.c.Write(fc.wbuf); err != nil {
			fc.wmu.Unlock()
			fc.fail(fmt.Errorf("%w: %v", ErrFetchConnClosed, err))
			return nil, fc.Err()
		}
	}
	if cap(fc.wbuf) > 1<<20 {
		fc.wbuf = nil
	}
	fc.wmu.Unlock()
	if err != nil {
		forget()
		return nil, err
	}
	select {
	case v := <-ch:
		if len(v.Results) != len(keys) {
			fc.fail(fmt.Errorf("%w: %w: %d results for %d keys", ErrFetchConnClosed, ErrMalformed, len(v.Results), len(keys)))
			return nil, fc.Err()
		}
		return v, nil
	case <-fc.done:
		return nil, fc.Err()
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}
