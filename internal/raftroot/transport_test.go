package raftroot

import (
	"bufio"
	"errors"
	"io"
	"net"
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
	var cluster [16]byte
	tr := newTransport("db", cluster, 1, "", (&net.Dialer{}).DialContext, quiet())
	tr.unreachable = func(uint64) {}
	tr.snapshotled = func(uint64, bool) {}
	defer tr.close()
	tr.setPeer(3, ln.Addr().String())

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
