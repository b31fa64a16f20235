package bench

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// delayLink is a loopback TCP relay that stands for a long link: it
// forwards every connection it accepts to one address, and delivers each
// chunk of bytes, in either direction, oneWay after it read it. A
// request and its answer then take at least twice oneWay more than
// without the link. It counts the connections it holds.
type delayLink struct {
	ln     net.Listener
	to     string
	oneWay time.Duration

	open, peak atomic.Int64
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      map[net.Conn]struct{}
	closed     bool
}

// newDelayLink listens on a kernel-chosen loopback port and forwards to
// to, with rtt/2 of delay each way.
func newDelayLink(to string, rtt time.Duration) (*delayLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &delayLink{ln: ln, to: to, oneWay: rtt / 2, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is where clients of the link connect.
func (l *delayLink) Addr() string { return l.ln.Addr().String() }

// Open is the number of connections the link holds now.
func (l *delayLink) Open() int { return int(l.open.Load()) }

// TakePeak returns the most connections held at once since the last call
// (or the start), and starts again from those open now.
func (l *delayLink) TakePeak() int {
	return int(l.peak.Swap(l.open.Load()))
}

func (l *delayLink) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

func (l *delayLink) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *delayLink) untrack(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

func (l *delayLink) serve(c net.Conn) {
	defer l.wg.Done()
	defer c.Close()
	up, err := net.DialTimeout("tcp", l.to, dialTimeout)
	if err != nil {
		return
	}
	defer up.Close()
	if !l.track(c) || !l.track(up) {
		return
	}
	defer l.untrack(c)
	defer l.untrack(up)
	n := l.open.Add(1)
	defer l.open.Add(-1)
	for {
		p := l.peak.Load()
		if n <= p || l.peak.CompareAndSwap(p, n) {
			break
		}
	}
	done := make(chan struct{}, 2)
	go func() { l.pump(up, c); done <- struct{}{} }()
	go func() { l.pump(c, up); done <- struct{}{} }()
	<-done
	// One direction ended: the connection is over; unblock the other.
	c.Close()
	up.Close()
	<-done
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst, each read delivered oneWay after it was read,
// in order. It returns when either side fails.
func (l *delayLink) pump(dst, src net.Conn) {
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b: b[:n], due: time.Now().Add(l.oneWay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		if d := time.Until(ch.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(ch.b); err != nil {
			src.Close() // ends the reader
			for range q {
			}
			return
		}
	}
}

// Close stops accepting, closes every connection and waits for the
// link's goroutines.
func (l *delayLink) Close() {
	l.ln.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
