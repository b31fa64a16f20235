package tests

import (
	"fmt"
	"os/exec"
	"slices"
	"testing"
)

// TestStaticProxyElectedRelayAnswers: a proxy whose pool is fixed to a
// replica by --replicas, with --join, is the only proxy of data centre
// "a" with a replication address, so it is elected relay. A proxy that
// knows only a gossip seed fetches its misses through it: the elected
// relay answers them, and none falls back to the replicas.
func TestStaticProxyElectedRelayAnswers(t *testing.T) {
	root := startGossipQS(t, "root", "--dc", "b")
	seed := root.Addr["gossip"]
	replica := startGossipQS(t, "replica-1", "--join", seed, "--dc", "a")
	cache := []string{"--join", seed, "--dc", "a", "--role", "proxy", "--cache-bytes", "1", "--window", "5"}
	relay := startGossipQS(t, "static-relay", append(cache, "--replicas", replica.Addr["repl"])...)
	dir := t.TempDir()
	args := append([]string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "off",
		"--gossip", "127.0.0.1:0", "--node-name", "reader", "--log-level", "warn"}, cache...)
	reader := startCmd(t, dir, exec.Command(qsBin, args...), 3)
	pollFor(t, "the static proxy elected relay", func() bool {
		return slices.Equal(electedRelays(t, root, "a"), []string{"static-relay"})
	})
	pollFor(t, "the reader to fetch through the static proxy", func() bool {
		st, err := reader.client(t).Status(t.Context())
		if err != nil {
			return false
		}
		rs, _ := st["cache"].(map[string]any)["relays"].([]any)
		return len(rs) == 1 && rs[0] == relay.Addr["repl"]
	})
	want, last := writeEvicted(t, root, []*proc{reader}, "st/", 20)
	waitIndex(t, relay, last)
	fallbacks := func() float64 {
		return metricValue(t, reader.Addr["http"], `qs_proxy_fetches_total{db="default",result="fallback"}`)
	}
	fb := fallbacks()
	readAll(t, []*proc{reader}, want, last)
	if n := metricValue(t, relay.Addr["http"], `qs_repl_fetch_keys_total{result="ok"}`); n == 0 {
		t.Fatalf("the elected static proxy answered no fetch (reader fall-backs %v)", fallbacks()-fb)
	}
	if n := fallbacks() - fb; n != 0 {
		t.Fatal(fmt.Sprintf("%v reads fell back to the replicas with a relay elected", n))
	}
}
