package tests

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/discovery"
)

// TestPrefetchFollowsElectedRelays: two proxies of data centre "a" are
// elected relays; two readers with a transient tier and only a gossip
// seed subscribe to both relays' prefetch streams, so a key one reader
// missed is prefetched by the other. When a relay dies, the readers
// close its subscription and keep the other's, without a restart.
func TestPrefetchFollowsElectedRelays(t *testing.T) {
	root := startGossipQS(t, "root", "--dc", "b")
	seed := root.Addr["gossip"]
	startGossipQS(t, "replica-1", "--join", seed, "--dc", "a")
	cache := []string{"--join", seed, "--dc", "a", "--role", "proxy", "--cache-bytes", "1", "--window", "5",
		"--transient-bytes", "16777216"}
	names := []string{"pf-relay-x", "pf-relay-y"}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(discovery.RelayRank(a), discovery.RelayRank(b)) })
	relays := map[string]*proc{}
	for _, name := range names {
		relays[name] = startGossipQS(t, name, cache...)
	}
	var readers []*proc
	for i := range 2 {
		readers = append(readers, startGossipReader(t, fmt.Sprint("pf-reader-", i), cache...))
	}
	ctx := context.Background()
	cacheOf := func(p *proc) map[string]any {
		st, err := p.client(t).Status(ctx)
		if err != nil {
			return nil
		}
		return st["cache"].(map[string]any)
	}
	subscribed := func(p *proc) []string {
		c := cacheOf(p)
		if c == nil {
			return nil
		}
		l, ok := c["prefetch_relays"].([]any)
		if !ok {
			t.Fatalf("%s: no prefetch_relays in the cache status", p.Addr["http"])
		}
		var out []string
		for _, a := range l {
			out = append(out, a.(string))
		}
		return out
	}
	relayRepl := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, relays[n].Addr["repl"])
		}
		slices.Sort(out)
		return out
	}
	for _, r := range readers {
		pollFor(t, r.Addr["http"]+" subscribed to both relays", func() bool {
			return slices.Equal(subscribed(r), relayRepl(names...))
		})
	}
	for _, name := range names {
		pollFor(t, "relay "+name+" to subscribe to none", func() bool {
			c := cacheOf(relays[name])
			return c != nil && c["relay"] == true && len(subscribed(relays[name])) == 0
		})
	}

	// A key the first reader misses is prefetched by the second. A miss
	// that a loaded relay did not answer in time is fetched from a replica
	// instead, and is not published: each round writes fresh keys, and a
	// few rounds give the relays their chance.
	prefetched := func(p *proc) float64 { f, _ := cacheOf(p)["prefetched"].(float64); return f }
	c := readers[0].client(t)
	received := false
	for round := 0; round < 4 && !received; round++ {
		want, last := writeEvicted(t, root, readers, fmt.Sprintf("pf%d/", round), 20)
		before := prefetched(readers[1])
		for k, v := range want {
			got, err := c.Get(ctx, k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
			if err != nil || string(got.Value) != v {
				t.Fatalf("%s: %q, %v", k, got.Value, err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for !received && time.Now().Before(deadline) {
			received = prefetched(readers[1]) > before
			time.Sleep(20 * time.Millisecond)
		}
		if !received {
			t.Logf("round %d: the second reader received none of the first's misses", round)
		}
	}
	if !received {
		t.Fatal("in 4 rounds the second reader received none of the first's misses")
	}

	relays[names[0]].kill()
	for _, r := range readers {
		pollFor(t, r.Addr["http"]+" subscribed to the relay left", func() bool {
			return slices.Equal(subscribed(r), relayRepl(names[1]))
		})
	}
}
