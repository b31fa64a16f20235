package tests

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestNotRootNamesRootHTTP: in a chain root → replica → proxy, a write to
// the replica or to the proxy, through the HTTP door, the memcached door
// or `qs put`, is refused not_root naming the root's HTTP address (which
// the root told down the tree), not a replication address; the CLI prints
// it once. The refused writes change nothing.
func TestNotRootNamesRootHTTP(t *testing.T) {
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	proxy := startQS(t, t.TempDir(), "--upstream", replica.Addr["repl"], "--role", "proxy")
	ctx := context.Background()
	w, err := root.client(t).Put(ctx, "k", []byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rootHTTP := root.Addr["http"]
	for _, n := range []struct {
		what string
		p    *proc
	}{{"replica", replica}, {"proxy", proxy}} {
		c := n.p.client(t)
		// The address travels down with the stream: wait for the node
		// to have it, then check every door.
		var e *client.Error
		pollFor(t, "the "+n.what+" to name the root", func() bool {
			_, err := c.Put(ctx, "k", []byte("new"), nil)
			return errors.As(err, &e) && e.Code == "not_root" && slices.Equal(e.RootHTTP, []string{rootHTTP})
		})
		if !strings.Contains(e.Message, "send writes to its root at http://"+rootHTTP) {
			t.Fatalf("%s: not_root message %q, want it to name http://%s", n.what, e.Message, rootHTTP)
		}

		mc := dialMC(t, n.p.Addr["memcache"])
		if _, err := mc.nc.Write([]byte("set k 0 0 3\r\nnew\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := mc.r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "CLIENT_ERROR") || !strings.Contains(line, "http://"+rootHTTP) {
			t.Fatalf("%s: memcached set answered %q, %v; want CLIENT_ERROR naming http://%s", n.what, line, err, rootHTTP)
		}

		out, code := runQS(t, "put", "--addr", n.p.Addr["http"], "k", "new")
		if code == 0 || strings.Count(out, "http://"+rootHTTP) != 1 || strings.Count(out, "not_root") != 1 {
			t.Fatalf("%s: qs put exited %d and printed %q; want a failure naming http://%s once", n.what, code, out, rootHTTP)
		}

		v, err := c.Get(ctx, "k", client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second})
		if err != nil || string(v.Value) != "v" || v.Index != w.Index {
			t.Fatalf("%s: after the refused writes k is %+v, %v; want v at %d", n.what, v, err, w.Index)
		}
	}
	if n := metricValue(t, proxy.Addr["http"], `qs_http_errors_total{kind="not_root"}`); n < 1 {
		t.Fatalf("the proxy counted %v not_root errors", n)
	}
}

// TestNotRootNamesHARoot: a replica of a follower of a replicated root
// names the leader's HTTP address first, then the follower's (any member
// takes writes; the leader without forwarding them), and a write sent to
// the first address it names is accepted.
func TestNotRootNamesHARoot(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.startAll()
	leader := c.leader(60 * time.Second)
	follower := c.members[0]
	if follower == leader {
		follower = c.members[1]
	}
	rep := startQS(t, t.TempDir(), "--upstream", follower.repl)
	rc := rep.client(t)
	ctx := context.Background()
	want := []string{leader.http, follower.http}
	var e *client.Error
	pollFor(t, "the replica to name the leader, then its source", func() bool {
		_, err := rc.Put(ctx, "k", []byte("v"), nil)
		return errors.As(err, &e) && e.Code == "not_root" && slices.Equal(e.RootHTTP, want)
	})
	cl, err := client.New(e.RootHTTP[:1], client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatalf("a write to the address named: %v", err)
	}
}
