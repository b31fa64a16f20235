package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/cache"
)

// TestL2OverRealProcesses: two proxies of a data centre with two shards;
// the second names the first in --dc-peers. Once the first read the keys
// of its shard, the second's misses of them are answered by the first
// (l2_hits in its status, l2_served in the first's), every value right.
func TestL2OverRealProcesses(t *testing.T) {
	shards, names := twoShardNodes()
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	proxyArgs := []string{"--upstream", root.Addr["repl"], "--role", "proxy", "--replicas", replica.Addr["repl"],
		"--cache-bytes", "1", "--window", "5", "--shards", "2", "--shard-cache-bytes", "1048576",
		// An L2 answer late on a loaded machine is still a hit here.
		"--l2-attempt-timeout", "4s",
		// The owner's shard budget is filled by its reads alone here
		// (the warm-up would hold its shard's padding keys too).
		"--shard-warm-rate", "-1"}
	owner := startQS(t, t.TempDir(), append(proxyArgs, "--node-name", names[0])...)
	asker := startQS(t, t.TempDir(), append(proxyArgs, "--node-name", names[1], "--dc-peers", owner.Addr["repl"])...)
	ctx := context.Background()
	pollFor(t, "the asker's L2 connection to the owner", func() bool {
		peers := cacheStatus(t, asker)["dc_peers"].([]any)
		return len(peers) == 1 && peers[0].(map[string]any)["up"] == true && peers[0].(map[string]any)["name"] == names[0]
	})

	want, ofOwner, last := writeShardKeys(t, root, "app/k", 40, shards, names[0])
	for _, p := range []*proc{owner, asker} {
		if _, err := p.client(t).Get(ctx, "pad9", client.ReadOptions{MinIndex: last, Wait: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		pollFor(t, "the proxy to keep only its window", func() bool {
			st, err := p.client(t).Status(ctx)
			return err == nil && st["proxy"].(map[string]any)["cached_values"].(float64) <= 5
		})
	}
	oc, ac := owner.client(t), asker.client(t)
	for _, k := range ofOwner {
		if got, err := oc.Get(ctx, k, client.ReadOptions{MinIndex: last}); err != nil || string(got.Value) != want[k] {
			t.Fatalf("%s at the owner: %v", k, err)
		}
	}
	if c := cacheStatus(t, owner); c["shard_values"] != float64(len(ofOwner)) {
		t.Fatalf("the owner's shard budget holds %v values, want %d: %v", c["shard_values"], len(ofOwner), c)
	}
	for k, v := range want {
		if got, err := ac.Get(ctx, k, client.ReadOptions{MinIndex: last}); err != nil || string(got.Value) != v {
			t.Fatalf("%s at the asker: %v", k, err)
		}
	}
	if c := cacheStatus(t, asker); c["l2_hits"] != float64(len(ofOwner)) {
		t.Fatalf("the asker's l2_hits %v, want the %d keys of the owner's shard: %v", c["l2_hits"], len(ofOwner), c)
	}
	if c := cacheStatus(t, owner); c["l2_served"] != float64(len(ofOwner)) {
		t.Fatalf("the owner served %v L2 requests, want %d: %v", c["l2_served"], len(ofOwner), c)
	}
	if got := metricValue(t, asker.Addr["http"], `qs_store_proxy_tier_lookups_total{db="default",result="hit",tier="l2"}`); got != float64(len(ofOwner)) {
		t.Fatalf("the asker's metrics count %v L2 hits, want %d", got, len(ofOwner))
	}
}

// TestShardWarmupOverRealProcesses: keys written before the proxies
// start, none read anywhere. The owner of a shard fills its shard
// budget with them in the background once it has applied the log; a
// first read of each at the other proxy is then an L2 hit, and the
// owner itself serves them without a fetch.
func TestShardWarmupOverRealProcesses(t *testing.T) {
	shards, names := twoShardNodes()
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	ctx := context.Background()
	want, ofOwner, last := writeShardKeys(t, root, "warm/k", 60, shards, names[0])
	proxyArgs := []string{"--upstream", root.Addr["repl"], "--role", "proxy", "--replicas", replica.Addr["repl"],
		"--cache-bytes", "1", "--window", "5", "--shards", "2", "--shard-cache-bytes", "1048576", "--l2-attempt-timeout", "4s"}
	owner := startQS(t, t.TempDir(), append(proxyArgs, "--node-name", names[0])...)
	asker := startQS(t, t.TempDir(), append(proxyArgs, "--node-name", names[1], "--dc-peers", owner.Addr["repl"], "--shard-warm-rate", "-1")...)
	pollFor(t, "the owner's warm-up of its shard", func() bool {
		return cacheStatus(t, owner)["shard_values"].(float64) >= float64(len(ofOwner))
	})
	pollFor(t, "the asker's L2 connection to the owner", func() bool {
		peers := cacheStatus(t, asker)["dc_peers"].([]any)
		return len(peers) == 1 && peers[0].(map[string]any)["up"] == true
	})
	ac, oc := asker.client(t), owner.client(t)
	for _, k := range ofOwner {
		if got, err := ac.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second}); err != nil || string(got.Value) != want[k] {
			t.Fatalf("%s at the asker: %v", k, err)
		}
	}
	if c := cacheStatus(t, asker); c["l2_hits"] != float64(len(ofOwner)) || c["remote_fetches"] != float64(0) {
		t.Fatalf("the asker: l2_hits %v, remote_fetches %v; want %d and 0: %v", c["l2_hits"], c["remote_fetches"], len(ofOwner), c)
	}
	before := cacheStatus(t, owner)["remote_fetches"]
	for _, k := range ofOwner {
		if got, err := oc.Get(ctx, k, client.ReadOptions{MinIndex: last}); err != nil || string(got.Value) != want[k] {
			t.Fatalf("%s at the owner: %v", k, err)
		}
	}
	if c := cacheStatus(t, owner); c["remote_fetches"] != before {
		t.Fatalf("the owner fetched its own warmed keys: remote_fetches %v, was %v", c["remote_fetches"], before)
	}
	if got := metricValue(t, owner.Addr["http"], `qs_proxy_shard_warm_total{db="default",result="held"}`); got < float64(len(ofOwner)) {
		t.Fatalf("the owner's warm-up held %v values, want at least %d", got, len(ofOwner))
	}
}

// TestShardWarmupThroughARelayIsNotPrefetched: an owner warms its shard
// through the relay of its data centre while another proxy is subscribed
// to the relay's prefetch stream. The relay answers the warm-up's
// fetches quietly (qs_repl_fetch_quiet_total) and publishes none of
// their values; a value the owner then reads is published, and reaches
// the other proxy.
func TestShardWarmupThroughARelayIsNotPrefetched(t *testing.T) {
	shards, names := twoShardNodes()
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	tier := []string{"--upstream", root.Addr["repl"], "--role", "proxy", "--replicas", replica.Addr["repl"],
		"--cache-bytes", "1", "--window", "5", "--transient-bytes", "1048576"}
	relay := startQS(t, t.TempDir(), append(tier, "--relay")...)
	other := startQS(t, t.TempDir(), append(tier, "--relays", relay.Addr["repl"])...)
	pollFor(t, "the other proxy's prefetch subscription", func() bool {
		return metricValue(t, relay.Addr["http"], "qs_repl_prefetch_subscribers") >= 1
	})
	want, ofOwner, last := writeShardKeys(t, root, "quiet/k", 60, shards, names[0])
	if _, err := relay.client(t).Get(context.Background(), "pad9", client.ReadOptions{MinIndex: last, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	owner := startQS(t, t.TempDir(), append(tier, "--relays", relay.Addr["repl"], "--shards", "2", "--node-name", names[0],
		"--shard-cache-bytes", "1048576")...)
	pollFor(t, "the owner's warm-up of its shard", func() bool {
		return cacheStatus(t, owner)["shard_values"].(float64) >= float64(len(ofOwner))
	})
	if n := metricValue(t, relay.Addr["http"], "qs_repl_fetch_quiet_total"); n == 0 {
		t.Fatal("the relay answered no quiet fetch: the warm-up did not go through it")
	}
	published := func() float64 {
		return metricValue(t, relay.Addr["http"], `qs_repl_prefetch_published_total{result="queued"}`) +
			metricValue(t, relay.Addr["http"], `qs_repl_prefetch_published_total{result="dropped"}`)
	}
	if n := published(); n != 0 {
		t.Fatalf("the relay published %v values of the warm-up of %d", n, len(ofOwner))
	}
	if c := cacheStatus(t, other); c["prefetched"] != float64(0) {
		t.Fatalf("the other proxy holds %v prefetched values after the warm-up: %v", c["prefetched"], c)
	}
	// A read is published: the subscription was there all along.
	var read string
	for k := range want {
		if !shards.Owns(names[0], []byte(k)) {
			read = k
			break
		}
	}
	got, err := owner.client(t).Get(context.Background(), read, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
	if err != nil || string(got.Value) != want[read] {
		t.Fatalf("%s at the owner: %q, %v", read, got.Value, err)
	}
	pollFor(t, "the read's value at the other proxy", func() bool { return cacheStatus(t, other)["prefetched"].(float64) >= 1 })
	if n := published(); n != 1 {
		t.Fatalf("the relay published %v values for one read, want 1", n)
	}
}

// twoShardNodes is a map of two shards and a node name owning each.
func twoShardNodes() (cache.ShardMap, []string) {
	shards, _ := cache.NewShardMap(2)
	var names []string
	for i := 0; len(names) < 2; i++ {
		if n := fmt.Sprint("dc1-proxy-", i); len(names) == 0 || shards.OfNode(n) != shards.OfNode(names[0]) {
			names = append(names, n)
		}
	}
	return shards, names
}

// writeShardKeys writes n keys prefix00.. ("value of " and the key) at
// root, then 10 padding keys, so that a proxy of window 5 keeps none of
// them. It returns the values written, the keys node owner owns under
// shards, and the index of the last write.
func writeShardKeys(t *testing.T, root *proc, prefix string, n int, shards cache.ShardMap, owner string) (want map[string]string, ofOwner []string, last uint64) {
	t.Helper()
	ctx := context.Background()
	rc := root.client(t)
	want = map[string]string{}
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s%02d", prefix, i)
		r, err := rc.Put(ctx, k, []byte("value of "+k), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[k], last = "value of "+k, r.Index
		if shards.Owns(owner, []byte(k)) {
			ofOwner = append(ofOwner, k)
		}
	}
	for i := 0; i < 10; i++ {
		r, err := rc.Put(ctx, fmt.Sprint("pad", i), []byte("x"), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Index
	}
	return want, ofOwner, last
}

// cacheStatus is the "cache" object of p's status.
func cacheStatus(t *testing.T, p *proc) map[string]any {
	t.Helper()
	st, err := p.client(t).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st["cache"].(map[string]any)
}
