package tests

import (
	"cmp"
	"fmt"
	"os/exec"
	"slices"
	"testing"

	"github.com/quicksilver-kv/qs/internal/discovery"
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
	reader := startGossipReader(t, "reader", cache...)
	pollFor(t, "the static proxy elected relay", func() bool {
		return slices.Equal(electedRelays(t, root, "a"), []string{"static-relay"})
	})
	waitOnlyRelay(t, reader, "the static proxy", relay)
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

// TestStaticRelaysProxyNeverElected: a proxy that names its relays with
// --relays and joins the overlay is their client: it advertises role
// relay-client and the election never gives it a seat, even when it
// ranks first and is the only proxy of its data centre. A proxy that
// joins later takes the seat and answers the fetches of a reader, while
// the client keeps fetching through its configured relay.
func TestStaticRelaysProxyNeverElected(t *testing.T) {
	root := startGossipQS(t, "root", "--dc", "b")
	seed := root.Addr["gossip"]
	replica := startGossipQS(t, "replica-1", "--join", seed, "--dc", "a")
	cacheFlags := []string{"--role", "proxy", "--cache-bytes", "1", "--window", "5"}
	// The configured relay stays out of the overlay.
	dcRelay := startQS(t, t.TempDir(), append([]string{"--upstream", root.Addr["repl"], "--relay", "--replicas", replica.Addr["repl"]}, cacheFlags...)...)
	joined := append([]string{"--join", seed, "--dc", "a", "--relays-per-dc", "1"}, cacheFlags...)
	// The client ranks first: a rank alone would elect it.
	names := []string{"static-client", "joiner"}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(discovery.RelayRank(a), discovery.RelayRank(b)) })
	clientName, joinerName := names[0], names[1]
	client := startGossipQS(t, clientName, append(joined, "--relays", dcRelay.Addr["repl"])...)

	pollFor(t, "the overlay to list the client as a proxy of data centre a", func() bool {
		return slices.Equal(dcProxies(t, root, "a"), []string{clientName})
	})
	if r := electedRelays(t, root, "a"); len(r) != 0 {
		t.Fatalf("data centre a elected %v; a client of fixed relays must never be elected", r)
	}
	if role := memberRole(t, root, clientName); role != "relay-client" {
		t.Fatalf("the client advertises role %q, want relay-client", role)
	}

	joiner := startGossipQS(t, joinerName, joined...)
	pollFor(t, "the joiner elected relay", func() bool {
		return slices.Equal(electedRelays(t, root, "a"), []string{joinerName})
	})
	pollFor(t, "the joiner to answer as a relay", func() bool {
		st, err := joiner.client(t).Status(t.Context())
		return err == nil && st["cache"].(map[string]any)["relay"] == true
	})
	reader := startGossipReader(t, "reader", joined...)
	waitOnlyRelay(t, reader, "the joiner", joiner)

	want, last := writeEvicted(t, root, []*proc{reader, client}, "sc/", 20)
	waitIndex(t, joiner, last)
	fallbacks := func(p *proc) float64 {
		return metricValue(t, p.Addr["http"], `qs_proxy_fetches_total{db="default",result="fallback"}`)
	}
	fbReader, fbClient := fallbacks(reader), fallbacks(client)
	readAll(t, []*proc{reader, client}, want, last)
	if n := metricValue(t, joiner.Addr["http"], `qs_repl_fetch_keys_total{result="ok"}`); n == 0 {
		t.Fatal("the elected joiner answered no fetch")
	}
	if n := metricValue(t, dcRelay.Addr["http"], `qs_repl_fetch_keys_total{result="ok"}`); n == 0 {
		t.Fatal("the configured relay answered none of its client's fetches")
	}
	if n := metricValue(t, client.Addr["http"], `qs_repl_fetch_keys_total{result="ok"}`); n != 0 {
		t.Fatalf("the client of fixed relays answered %v fetched keys", n)
	}
	if n, m := fallbacks(reader)-fbReader, fallbacks(client)-fbClient; n != 0 || m != 0 {
		t.Fatalf("reads fell back to the replicas: %v at the reader, %v at the client", n, m)
	}
	if r := electedRelays(t, root, "a"); !slices.Equal(r, []string{joinerName}) {
		t.Fatalf("data centre a elected %v, want only %s", r, joinerName)
	}
}

// dcProxies are the proxies of data centre dc that p's overlay member
// list shows, sorted.
func dcProxies(t *testing.T, p *proc, dc string) []string {
	t.Helper()
	var out struct {
		DCs []struct {
			DC      string   `json:"dc"`
			Proxies []string `json:"proxies"`
		} `json:"dcs"`
	}
	if err := getJSON("http://"+p.Addr["http"]+"/v1/members", &out); err != nil {
		return nil
	}
	for _, d := range out.DCs {
		if d.DC == dc {
			r := slices.Clone(d.Proxies)
			slices.Sort(r)
			return r
		}
	}
	return nil
}

// memberRole is the role for database "default" that member name
// advertises, as p's overlay member list shows it.
func memberRole(t *testing.T, p *proc, name string) string {
	t.Helper()
	var out struct {
		Members []struct {
			Name      string `json:"name"`
			Databases []struct {
				Name string `json:"name"`
				Role string `json:"role"`
			} `json:"databases"`
		} `json:"members"`
	}
	if err := getJSON("http://"+p.Addr["http"]+"/v1/members", &out); err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Members {
		for _, d := range m.Databases {
			if m.Name == name && d.Name == "default" {
				return d.Role
			}
		}
	}
	return ""
}

// startGossipReader starts a proxy named name that joins the overlay with
// extra and has no replication address: it only reads, and is never
// elected relay.
func startGossipReader(t *testing.T, name string, extra ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "off",
		"--gossip", "127.0.0.1:0", "--node-name", name, "--log-level", "warn"}, extra...)
	return startCmd(t, dir, exec.Command(qsBin, args...), 3)
}

// waitOnlyRelay waits until proxy p fetches through relay (named what)
// alone.
func waitOnlyRelay(t *testing.T, p *proc, what string, relay *proc) {
	t.Helper()
	pollFor(t, "the reader to fetch through "+what, func() bool {
		st, err := p.client(t).Status(t.Context())
		if err != nil {
			return false
		}
		rs, _ := st["cache"].(map[string]any)["relays"].([]any)
		return len(rs) == 1 && rs[0] == relay.Addr["repl"]
	})
}
