package clusterauth

import (
	"context"
	"net"
	"testing"
)

// BenchmarkKeyedDial is the cost of one authenticated connection over
// loopback: dial, keyed handshake both ways, close.
func BenchmarkKeyedDial(b *testing.B) {
	a := New(Options{Key: testKey(b, 1)})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln := a.Listener(raw, "bench", 0)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				PeerOf(c)
				c.Close()
			}()
		}
	}()
	dial := a.Dialer("raft-node/1")
	b.ResetTimer()
	for b.Loop() {
		c, err := dial(context.Background(), "tcp", raw.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
