package clusterauth

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// keys returns the Options of a node holding ks, the first the one it
// proves itself with.
func keys(ks ...Key) Options { return Options{Key: ks[0], MoreKeys: ks[1:]} }

// A rotation of the cluster key in three steps, one node at a time: every
// node accepts the new key besides the old, then proves itself with the
// new one, then drops the old. At every step, every pair of nodes in
// adjacent steps connects, both ways; a node with the old key alone and a
// node with the new key alone do not.
func TestClusterKeyRotationOverlap(t *testing.T) {
	old, nw := testKey(t, 1), testKey(t, 2)
	steps := []Options{keys(old), keys(old, nw), keys(nw, old), keys(nw)}
	for i := range steps {
		for j := range steps {
			if i-j > 1 || j-i > 1 {
				continue
			}
			port := "t-rotate"
			ln, peers, errs := echoServer(t, New(steps[i]), port, 0)
			c, err := New(steps[j]).Dialer(RaftClaim(3))(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatalf("client in step %d to server in step %d: %v", j, i, err)
			}
			echo(t, c)
			p, err := waitPeer(t, peers, errs)
			c.Close()
			if err != nil || !p.Authenticated || !p.Has("raft-node/3") {
				t.Fatalf("server in step %d, client in step %d: peer %+v %v", i, j, p, err)
			}
		}
	}
	ln, _, _ := echoServer(t, New(keys(old)), "t-rotate-far", 0)
	if _, err := New(keys(nw)).Dialer("")(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, ErrBadKey) {
		t.Fatalf("new key alone to old key alone: %v, want ErrBadKey", err)
	}
}

// Reload puts new keys in force for new connections without a restart: a
// peer with a removed key is refused, one with the new key accepted; a
// reload that would change the mode is refused and changes nothing.
func TestReloadReplacesKeys(t *testing.T) {
	old, nw := testKey(t, 1), testKey(t, 2)
	a := New(keys(old))
	ln, peers, errs := echoServer(t, a, "t-reload", 0)
	dial := func(k Key) error {
		c, err := New(keys(k)).Dialer("")(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		echo(t, c)
		_, err = waitPeer(t, peers, errs)
		return err
	}
	if err := dial(nw); !errors.Is(err, ErrBadKey) {
		t.Fatalf("new key before the reload: %v", err)
	}
	<-errs
	if err := a.Reload(keys(nw)); err != nil {
		t.Fatal(err)
	}
	if err := dial(nw); err != nil {
		t.Fatalf("new key after the reload: %v", err)
	}
	if err := dial(old); !errors.Is(err, ErrBadKey) {
		t.Fatalf("removed key after the reload: %v, want ErrBadKey", err)
	}
	<-errs
	if err := a.Reload(Options{}); !errors.Is(err, ErrReloadMode) {
		t.Fatalf("reload without a key: %v, want ErrReloadMode", err)
	}
	if a.Mode() != "cluster-key" {
		t.Fatalf("mode %s after a refused reload", a.Mode())
	}
	if err := dial(nw); err != nil {
		t.Fatalf("key in force after a refused reload: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	k1, k2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	ks, err := ParseKeys([]byte(k1 + "\n\n" + k2 + "\n"))
	if err != nil || len(ks) != 2 {
		t.Fatalf("two hex keys: %d %v", len(ks), err)
	}
	if want, _ := hex.DecodeString(k1); string(ks[0].secret) != string(want) {
		t.Fatal("the first key is not the first line")
	}
	if _, err := ParseKeys([]byte(k1 + "\n" + "abcd\n")); !errors.Is(err, ErrWeakKey) {
		t.Fatalf("a short second key: %v, want ErrWeakKey", err)
	}
	raw := "not hex at all, but long enough to be a key\nsecond line of it"
	if ks, err := ParseKeys([]byte(raw)); err != nil || len(ks) != 1 || string(ks[0].secret) != raw {
		t.Fatalf("raw key with a newline: %d %v", len(ks), err)
	}
}
