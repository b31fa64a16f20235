package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/cache"
)

// TestRelayOverRealProcesses: a data centre of real processes — a root, a
// full replica, a relay (qs serve --role proxy --relay) and a proxy that
// names it (--relays) — serves every value right; the relay fetched the
// proxy's misses, and both report their cache tiers in their status.
func TestRelayOverRealProcesses(t *testing.T) {
	root := startQS(t, t.TempDir())
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	relay := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"], "--role", "proxy", "--relay",
		"--replicas", replica.Addr["repl"], "--cache-bytes", "1", "--window", "5", "--transient-bytes", "1048576")
	px := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"], "--role", "proxy", "--relays", relay.Addr["repl"],
		"--replicas", replica.Addr["repl"], "--cache-bytes", "1", "--window", "5", "--transient-bytes", "1048576",
		"--dc", "dc1", "--shards", "8", "--node-name", "proxy-a")
	// A second proxy of the data centre, subscribed to the relay's
	// prefetch stream before the first proxy misses anything.
	px2 := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"], "--role", "proxy", "--relays", relay.Addr["repl"],
		"--replicas", replica.Addr["repl"], "--cache-bytes", "1", "--window", "5", "--transient-bytes", "1048576")
	pollFor(t, "two prefetch subscribers at the relay", func() bool {
		return metricValue(t, relay.Addr["http"], "qs_repl_prefetch_subscribers") >= 2
	})
	ctx := context.Background()
	rc, pc := root.client(t), px.client(t)
	want := map[string]string{}
	var last uint64
	for i := 0; i < 40; i++ {
		k := fmt.Sprintf("app/k%02d", i)
		v := strings.Repeat(fmt.Sprint(i), 30+i*20)
		r, err := rc.Put(ctx, k, []byte(v), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[k], last = v, r.Index
	}
	// The relay answers only versions it has applied: let it catch up, so
	// the proxy's misses go through it.
	if _, err := relay.client(t).Get(ctx, "app/k00", client.ReadOptions{MinIndex: last, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		got, err := pc.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Value) != v {
			t.Fatalf("%s: %d bytes, want %d", k, len(got.Value), len(v))
		}
	}
	cacheOf := func(p *proc) map[string]any {
		st, err := p.client(t).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := st["cache"].(map[string]any)
		if !ok {
			t.Fatalf("status without a cache object: %v", st)
		}
		return c
	}
	pcache, rcache := cacheOf(px), cacheOf(relay)
	if pcache["remote_fetches"].(float64) == 0 || pcache["relay"] != false || len(pcache["relays"].([]any)) != 1 {
		t.Fatalf("proxy cache status %v", pcache)
	}
	// The relay read nothing for itself: its fetches were the proxy's.
	if rcache["remote_fetches"].(float64) == 0 || rcache["relay"] != true || rcache["transient_budget_bytes"] != float64(1<<20) {
		t.Fatalf("relay cache status %v", rcache)
	}
	shards, _ := cache.NewShardMap(8)
	if sh, ok := pcache["shard"].(map[string]any); !ok || sh["count"] != float64(8) || sh["index"] != float64(shards.OfNode("proxy-a")) {
		t.Fatalf("proxy cache status without its shard (%d of 8): %v", shards.OfNode("proxy-a"), pcache)
	}
	if _, ok := rcache["shard"]; ok {
		t.Fatalf("a relay without --shards shows a shard: %v", rcache)
	}
	if pcache["transient_values"].(float64) == 0 {
		t.Fatalf("the proxy's transient tier holds nothing after one read of each key: %v", pcache)
	}

	// Reactive prefetch: the keys the first proxy missed, resolved by the
	// relay, are served by the second without a fetch.
	// Every value the relay answered reaches the second proxy (a miss the
	// first proxy sent to a replica instead, its relay being behind, is
	// not published).
	relayed := metricValue(t, relay.Addr["http"], `qs_repl_fetch_keys_total{result="ok"}`)
	fallback := metricValue(t, px.Addr["http"], `qs_proxy_fetches_total{db="default",result="fallback"}`)
	if relayed == 0 || relayed+fallback < pcache["remote_fetches"].(float64) {
		t.Fatalf("the relay answered %v keys and the replicas %v of the first proxy's %v fetches", relayed, fallback, pcache["remote_fetches"])
	}
	pollFor(t, "the relay's answers prefetched by the second proxy", func() bool {
		return cacheOf(px2)["prefetched"].(float64) >= relayed
	})
	pollFor(t, "the second proxy to keep only its window", func() bool {
		st, err := px2.client(t).Status(ctx)
		return err == nil && st["proxy"].(map[string]any)["cached_values"].(float64) <= 5
	})
	c2 := px2.client(t)
	for k, v := range want {
		got, err := c2.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
		if err != nil || string(got.Value) != v {
			t.Fatalf("%s at the second proxy: %d bytes, %v; want %d", k, len(got.Value), err, len(v))
		}
	}
	if c := cacheOf(px2); c["remote_fetches"].(float64) > fallback {
		t.Fatalf("the second proxy fetched %v keys, more than the %v the relay did not answer: %v", c["remote_fetches"], fallback, c)
	}
}

// pollFor waits up to 60s for cond.
func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 60s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
