package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/cache"
)

// TestL2PeersFromOverlay: proxies of data centre "a" with two shards, a
// shard budget and no --dc-peers find each other through the overlay.
// The asker's misses of the owner's shard are answered by the owner
// (l2_hits); a proxy that joins later becomes a peer, and one that dies
// stops being one, without a restart.
func TestL2PeersFromOverlay(t *testing.T) {
	shards, _ := cache.NewShardMap(2)
	var names []string // owner, asker (another shard), late
	for i := 0; len(names) < 3; i++ {
		n := fmt.Sprint("l2-proxy-", i)
		if len(names) != 1 || shards.OfNode(n) != shards.OfNode(names[0]) {
			names = append(names, n)
		}
	}
	root := startGossipQS(t, "root", "--dc", "b")
	seed := root.Addr["gossip"]
	startGossipQS(t, "replica-1", "--join", seed, "--dc", "a")
	args := []string{"--join", seed, "--dc", "a", "--role", "proxy", "--cache-bytes", "1", "--window", "5",
		"--shards", "2", "--shard-cache-bytes", "1048576", "--l2-attempt-timeout", "4s"}
	owner := startGossipQS(t, names[0], args...)
	asker := startGossipQS(t, names[1], args...)
	ctx := context.Background()
	cacheOf := func(p *proc) map[string]any {
		st, err := p.client(t).Status(ctx)
		if err != nil {
			return nil
		}
		return st["cache"].(map[string]any)
	}
	// peersOf are p's L2 peers connected now, by name, sorted.
	peersOf := func(p *proc) []string {
		c := cacheOf(p)
		if c == nil {
			return nil
		}
		if c["dc_peers_source"] != "discovery" {
			t.Fatalf("%s: dc_peers_source %v, want discovery", p.Addr["http"], c["dc_peers_source"])
		}
		var out []string
		for _, e := range c["dc_peers"].([]any) {
			if pe := e.(map[string]any); pe["up"] == true {
				out = append(out, pe["name"].(string))
			}
		}
		slices.Sort(out)
		return out
	}
	pollFor(t, "the asker's L2 connection to the owner", func() bool { return slices.Equal(peersOf(asker), names[:1]) })
	pollFor(t, "the owner's L2 connection to the asker", func() bool { return slices.Equal(peersOf(owner), names[1:2]) })

	want, last := writeEvicted(t, root, []*proc{owner, asker}, "l2/", 30)
	var ofOwner []string
	for k := range want {
		if shards.Owns(names[0], []byte(k)) {
			ofOwner = append(ofOwner, k)
		}
	}
	if len(ofOwner) == 0 {
		t.Fatal("no key in the owner's shard")
	}
	oc, ac := owner.client(t), asker.client(t)
	for _, k := range ofOwner {
		if got, err := oc.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second}); err != nil || string(got.Value) != want[k] {
			t.Fatalf("%s at the owner: %q, %v", k, got.Value, err)
		}
	}
	for _, k := range ofOwner {
		if got, err := ac.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second}); err != nil || string(got.Value) != want[k] {
			t.Fatalf("%s at the asker: %q, %v", k, got.Value, err)
		}
	}
	if c := cacheOf(asker); c["l2_hits"] != float64(len(ofOwner)) {
		t.Fatalf("the asker's l2_hits %v, want the %d keys of the owner's shard", c["l2_hits"], len(ofOwner))
	}

	late := startGossipQS(t, names[2], args...)
	pollFor(t, "the asker to take up the proxy that joined", func() bool {
		return slices.Equal(peersOf(asker), []string{names[0], names[2]})
	})
	owner.kill()
	pollFor(t, "the asker to drop the dead owner", func() bool {
		c := cacheOf(asker)
		return c != nil && len(c["dc_peers"].([]any)) == 1 && slices.Equal(peersOf(asker), names[2:])
	})
	if got := peersOf(late); !slices.Contains(got, names[1]) {
		t.Fatalf("the late proxy's peers %v lack the asker %s", got, names[1])
	}
}
