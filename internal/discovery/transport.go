package discovery

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// Link decides the fate of one gossip packet or stream from this member
// to the member at addr (a gossip address): delivered after delay, or
// dropped. It is the seam through which tests put latency and partitions
// between members in one process; nil delivers everything at once.
type Link func(addr string) (delay time.Duration, drop bool)

// meteredTransport wraps memberlist's transport: it counts the bytes of
// the overlay (gossip_bytes_total) and applies the Link to what is sent.
type meteredTransport struct {
	memberlist.Transport
	link    Link
	in, out prometheus.Counter // gossip_bytes_total by direction
	packets chan *memberlist.Packet
	streams chan net.Conn
	// stopping: memberlist no longer reads; what the wrapped transport
	// still delivers is dropped, so its listeners can finish. done: the
	// wrapped transport is shut down; the forwarders end.
	stopping chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup
}

func newMeteredTransport(t memberlist.Transport, link Link, ms *Metrics) *meteredTransport {
	m := &meteredTransport{Transport: t, link: link,
		in: ms.gossipBytes.WithLabelValues("in"), out: ms.gossipBytes.WithLabelValues("out"),
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn), stopping: make(chan struct{}), done: make(chan struct{})}
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case p := <-t.PacketCh():
				m.in.Add(float64(len(p.Buf)))
				select {
				case m.packets <- p:
				case <-m.stopping:
				}
			case <-m.done:
				return
			}
		}
	}()
	go func() {
		defer m.wg.Done()
		for {
			select {
			case c := <-t.StreamCh():
				select {
				case m.streams <- &meteredConn{Conn: c, in: m.in, out: m.out}:
				case <-m.stopping:
					c.Close()
				}
			case <-m.done:
				return
			}
		}
	}()
	return m
}

func (m *meteredTransport) PacketCh() <-chan *memberlist.Packet { return m.packets }
func (m *meteredTransport) StreamCh() <-chan net.Conn           { return m.streams }

func (m *meteredTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if m.link != nil {
		delay, drop := m.link(addr)
		if drop {
			return time.Now(), nil // lost on the way, as UDP may be
		}
		if delay > 0 {
			// Delivered later, without holding up the sender, as a slow
			// network would; the buffer is memberlist's to reuse.
			buf := append([]byte(nil), b...)
			time.AfterFunc(delay, func() {
				select {
				case <-m.stopping:
				default:
					m.out.Add(float64(len(buf)))
					m.Transport.WriteTo(buf, addr)
				}
			})
			return time.Now(), nil
		}
	}
	m.out.Add(float64(len(b)))
	return m.Transport.WriteTo(b, addr)
}

func (m *meteredTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if m.link != nil {
		delay, drop := m.link(addr)
		if drop {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errPartitioned}
		}
		time.Sleep(delay)
	}
	c, err := m.Transport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &meteredConn{Conn: c, in: m.in, out: m.out}, nil
}

func (m *meteredTransport) Shutdown() error {
	close(m.stopping)
	err := m.Transport.Shutdown()
	close(m.done)
	m.wg.Wait()
	return err
}

type partitionedError struct{}

func (partitionedError) Error() string { return "qs: gossip link dropped" }

var errPartitioned error = partitionedError{}

// meteredConn counts the bytes of a gossip stream (push/pull, large
// messages).
type meteredConn struct {
	net.Conn
	in, out prometheus.Counter
}

func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(float64(n))
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(float64(n))
	return n, err
}
