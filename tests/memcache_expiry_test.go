package tests

import (
	"context"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/quicksilver-kv/qs/client"
)

// waitMiss polls addr's memcached door until key is gone.
func waitMiss(t *testing.T, addr, key string) {
	t.Helper()
	mc := gomemcache.New(addr)
	mc.Timeout = 30 * time.Second
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := mc.Get(key)
		if err == gomemcache.ErrCacheMiss {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still serves %s: %v", addr, key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// absentAt checks that p no longer has key once it applied index at,
// and returns nothing else: the read waits for the index.
func absentAt(t *testing.T, p *proc, key string, at uint64) {
	t.Helper()
	_, err := p.client(t).Get(context.Background(), key, client.ReadOptions{MinIndex: at, Wait: 30 * time.Second})
	if !client.IsNotFound(err) {
		t.Fatalf("%s at index %d: %v, want not found", key, at, err)
	}
}

// sameDataAll waits until every node serves the same data as the first.
func sameDataAll(t *testing.T, ps ...*proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		want, err := ps[0].client(t).Digest(context.Background(), client.ReadOptions{})
		same := err == nil
		for _, p := range ps[1:] {
			got, err := p.client(t).Digest(context.Background(), client.ReadOptions{MinIndex: want.Index, Wait: 30 * time.Second})
			same = same && err == nil && got.SHA256 == want.SHA256 && got.Keys == want.Keys
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the nodes never served the same data")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMemcacheExpiryAcrossTree: a key set with an exptime through the
// root's memcached door is served with its flags by a replica and a proxy,
// then deleted by the root once its expiry has come; every node applies
// that deletion from the log, and a key touched to a later expiry stays.
// Expiry survives a restart of the root: a key set before it stopped is
// deleted after it starts again, and a replica following the restarted
// root ends with the same data.
func TestMemcacheExpiryAcrossTree(t *testing.T) {
	root, replica, px := proxyTree(t)
	mc := gomemcache.New(root.Addr["memcache"])
	mc.Timeout = 30 * time.Second
	for _, it := range []*gomemcache.Item{
		{Key: "x/short", Value: []byte("s"), Flags: 7, Expiration: 1},
		{Key: "x/touched", Value: []byte("t"), Flags: 8, Expiration: 1},
		{Key: "x/keep", Value: []byte("k"), Flags: 9},
	} {
		if err := mc.Set(it); err != nil {
			t.Fatal(err)
		}
	}
	if err := mc.Touch("x/touched", 3600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{replica, px} {
		r := gomemcache.New(p.Addr["memcache"])
		r.Timeout = 30 * time.Second
		deadline := time.Now().Add(60 * time.Second)
		for {
			it, err := r.Get("x/keep")
			if err == nil {
				if it.Flags != 9 || string(it.Value) != "k" {
					t.Fatalf("x/keep at %s: %+v", p.Addr["memcache"], it)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("x/keep never reached %s: %v", p.Addr["memcache"], err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitMiss(t, root.Addr["memcache"], "x/short")
	at := root.client(t)
	gone, err := at.Digest(context.Background(), client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{root, replica, px} {
		absentAt(t, p, "x/short", gone.Index)
	}
	if it, err := mc.Get("x/touched"); err != nil || it.Flags != 8 {
		t.Fatalf("x/touched after the first expiry: %+v %v", it, err)
	}
	sameDataAll(t, root, replica, px)

	// A restart of the root while a key is due.
	if err := mc.Set(&gomemcache.Item{Key: "x/restart", Value: []byte("r"), Expiration: 2}); err != nil {
		t.Fatal(err)
	}
	// Its expiry is only in the data the root left on disk: the deletion
	// after the restart comes from the expiry index kept there.
	root.stop()
	root = startQS(t, root.Dir)
	waitMiss(t, root.Addr["memcache"], "x/restart")
	last, err := root.client(t).Digest(context.Background(), client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	follower := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	absentAt(t, follower, "x/restart", last.Index)
	sameDataAll(t, root, follower)
	if it, err := gomemcache.New(follower.Addr["memcache"]).Get("x/touched"); err != nil || it.Flags != 8 {
		t.Fatalf("x/touched at the new replica: %+v %v", it, err)
	}
}
