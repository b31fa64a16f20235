package repl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/store"
)

// A connection's first frame is bounded before the server knows what the
// client wants: a 100 MiB hello is refused by its length, not read.
func TestServerBoundsFirstFrame(t *testing.T) {
	st := openStore(t, "", dbName(t), store.DBID{1}, store.Retention{})
	addr := startServer(t, st, NewProcessID(), nil)
	before := testutil.ToFloat64(metricsOf(t).refusals.WithLabelValues(RefuseBadHello.String()))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write([]byte{byte(MsgHello), 0x06, 0x40, 0x00, 0x00, 'Q', 'S', 'R', '1'})
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("server answered %q", b)
	}
	if got := testutil.ToFloat64(metricsOf(t).refusals.WithLabelValues(RefuseBadHello.String())); got != before+1 {
		t.Fatalf("bad_hello refusals %v → %v: the 100 MiB first frame was not refused by its length", before, got)
	}
}

// With a cluster key, a replica holding the key follows the server; a
// client without it is closed before its hello is read, and counted.
func TestReplicationWithClusterKey(t *testing.T) {
	k1, _ := clusterauth.ParseKey(bytes.Repeat([]byte{1}, 32))
	k2, _ := clusterauth.ParseKey(bytes.Repeat([]byte{2}, 32))
	auth := clusterauth.New(clusterauth.Options{Key: k1})
	root := openStore(t, "", dbName(t), store.DBID{7}, store.Retention{})
	srv, err := NewServer(ServerConfig{Metrics: metricsOf(t), ProcessID: NewProcessID(), ProgressInterval: 50 * time.Millisecond}, func(db string) (*store.Store, bool) {
		return root, db == root.Name()
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(auth.Listener(raw, "repl-test", 16))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	addr := raw.Addr().String()
	writeN(t, root, "k", 50)

	replica := openStore(t, "", root.Name(), store.DBID{7}, store.Retention{})
	startReplica(t, replica, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.Dial = auth.Dialer("") })
	waitCaughtUp(t, replica, root)
	assertSame(t, replica, root)

	// Without the key: a plain client gets nothing back.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	WriteMessage(c, &Hello{Version: ProtocolVersion, ProcessID: NewProcessID(), Database: root.Name()})
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("a client without the key got %d bytes (%q)", len(b), b)
	}
	c.Close()
	// With another key: the dial fails.
	if _, err := LearnDBID(context.Background(), []string{addr}, root.Name(), NewProcessID(),
		clusterauth.New(clusterauth.Options{Key: k2}).Dialer("")); err == nil {
		t.Fatal("a client with another key learned the database id")
	} else if !errors.Is(err, clusterauth.ErrBadKey) {
		t.Logf("another key: %v", err)
	}
}
