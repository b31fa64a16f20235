package raftroot

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestRemovedPeerGetsWhatWasQueued: a peer removed from the membership is
// still sent the messages queued for it before (among them the commit of
// its removal, without which it would never learn it), then its
// connection closes.
func TestRemovedPeerGetsWhatWasQueued(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tr := peerTransport(t, ln.Addr().String())

	const n = 200
	var msgs []*pb.Message
	for i := range n {
		msgs = append(msgs, &pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)), Commit: new(uint64(i + 1))})
	}
	tr.send(msgs)
	tr.removePeer(3)

	ln.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the removed peer was not even connected to: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(c)
	if typ, _, err := readFrame(r, nil, maxHelloFrame); err != nil || typ != frameHello {
		t.Fatalf("first frame %d, %v; want a hello", typ, err)
	}
	got := 0
	for {
		typ, _, err := readFrame(r, nil, maxFrame)
		if errors.Is(err, io.EOF) {
			break // closed once the queue is sent
		}
		if err != nil {
			t.Fatalf("after %d messages: %v; want the connection closed", got, err)
		}
		if typ != frameMessage {
			t.Fatalf("frame of type %d", typ)
		}
		got++
	}
	if got != n {
		t.Fatalf("the removed peer got %d of the %d messages queued before its removal", got, n)
	}
}

// TestRemovedPeerNotReadingIsNotWaitedFor: a removed peer whose process
// takes connections but never reads gets what one connection takes; the
// sender then stops, instead of connecting again for every message left
// (each waiting out a write deadline) while it holds the queue.
func TestRemovedPeerNotReadingIsNotWaitedFor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn // held open, never read
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tr := peerTransport(t, ln.Addr().String())

	// Far more than the socket buffers of one connection hold.
	const n = 32
	var msgs []*pb.Message
	for i := range n {
		msgs = append(msgs, &pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)),
			Commit: new(uint64(i + 1)), Entries: []*pb.Entry{{Data: make([]byte, 1<<20)}}})
	}
	tr.send(msgs)
	tr.removePeer(3)

	stopped := make(chan struct{})
	go func() { tr.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Minute):
		t.Fatal("the removed peer's sender did not stop")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) > 1 {
		t.Fatalf("the removed peer was connected to %d times, want once", len(conns))
	}
}

// peerTransport is the transport of member 1, closed at the test's end,
// with one peer, member 3 at addr, and no Raft node to report to.
func peerTransport(t *testing.T, addr string) *transport {
	t.Helper()
	var cluster [16]byte
	tr := newTransport("db", NewMetrics(), cluster, 1, "", (&net.Dialer{}).DialContext, quiet())
	tr.unreachable = func(uint64) {}
	tr.snapshotled = func(uint64, bool) {}
	t.Cleanup(tr.close)
	tr.setPeer(3, addr)
	return tr
}
