package tests

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/discovery"
)

// TestProxiesFindRelaysThroughOverlay: a root, two full replicas, two
// proxies of data centre "a" that the overlay elects relays, a third
// that joins later (a spare: relays keep their seats), and two proxies
// that know only a gossip seed and their data centre (they have no
// replication listener, so they are never elected). The proxies fetch
// their misses through the relays; when a relay dies while they read,
// the spare is elected and they take up the other relay and the new one
// without a restart, failing no read; with no relay alive they fall back
// to the replicas, and those fetches are counted.
func TestProxiesFindRelaysThroughOverlay(t *testing.T) {
	start := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	root := startGossipQS(t, "root", "--dc", "b")
	seed := root.Addr["gossip"]
	startGossipQS(t, "replica-1", "--join", seed, "--dc", "a")
	startGossipQS(t, "replica-2", "--join", seed, "--dc", "b")
	cache := []string{"--join", seed, "--dc", "a", "--role", "proxy", "--cache-bytes", "1", "--window", "5"}
	// The spare ranks after the relays: should it claim a seat before it
	// sees theirs, the election keeps the lowest ranks.
	names := []string{"relay-x", "relay-y", "relay-z"}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(discovery.RelayRank(a), discovery.RelayRank(b)) })
	r1, r2, spare := names[0], names[1], names[2]
	relays := map[string]*proc{}
	for _, name := range []string{r1, r2} {
		relays[name] = startGossipQS(t, name, cache...)
	}
	pollFor(t, "both proxies of data centre a elected relays", func() bool {
		return slices.Equal(electedRelays(t, root, "a"), sorted(r1, r2))
	})
	relays[spare] = startGossipQS(t, spare, cache...)
	var readers []*proc
	for i := range 2 {
		dir := t.TempDir()
		args := append([]string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "off",
			"--gossip", "127.0.0.1:0", "--node-name", fmt.Sprint("proxy-", i), "--log-level", "warn"}, cache...)
		readers = append(readers, startCmd(t, dir, exec.Command(qsBin, args...), 3))
	}
	relayRepl := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, relays[n].Addr["repl"])
		}
		slices.Sort(out)
		return out
	}
	statusOf := func(p *proc) map[string]any {
		st, err := p.client(t).Status(context.Background())
		if err != nil {
			return nil
		}
		if st["proxy"].(map[string]any)["members_source"] != "discovery" {
			t.Fatalf("proxy status without members_source discovery: %v", st["proxy"])
		}
		return st
	}
	waitRelays := func(want []string) {
		t.Helper()
		for _, px := range readers {
			pollFor(t, fmt.Sprintf("%s to fetch through relays %v", px.Addr["http"], want), func() bool {
				st := statusOf(px)
				if st == nil {
					return false
				}
				var got []string
				for _, a := range st["cache"].(map[string]any)["relays"].([]any) {
					got = append(got, a.(string))
				}
				slices.Sort(got)
				return slices.Equal(got, want)
			})
		}
	}
	isRelay := func(name string) bool {
		st := statusOf(relays[name])
		return st != nil && st["cache"].(map[string]any)["relay"] == true
	}
	waitRelays(relayRepl(r1, r2))
	if got := electedRelays(t, root, "a"); !slices.Equal(got, sorted(r1, r2)) {
		t.Fatalf("relays %v after the spare joined, want %v kept", got, sorted(r1, r2))
	}
	// An elected relay answers as one once its own pool, set from the
	// overlay when its changes settle, asks the replicas.
	pollFor(t, "both elected relays to answer as relays", func() bool { return isRelay(r1) && isRelay(r2) })
	if isRelay(spare) {
		t.Fatalf("the spare %s answers as a relay while %s and %s are elected", spare, r1, r2)
	}
	phase("the proxies fetch through both elected relays")

	relayed := func(names ...string) float64 {
		var n float64
		for _, name := range names {
			n += metricValue(t, relays[name].Addr["http"], `qs_repl_fetch_keys_total{result="ok"}`)
		}
		return n
	}
	fallbacks := func() float64 {
		var n float64
		for _, px := range readers {
			n += metricValue(t, px.Addr["http"], `qs_proxy_fetches_total{db="default",result="fallback"}`)
		}
		return n
	}

	// 1. Both relays up: the proxies' misses go through them.
	want, last := writeEvicted(t, root, readers, "one/", 30)
	waitIndex(t, relays[r1], last)
	waitIndex(t, relays[r2], last)
	readAll(t, readers, want, last)
	if n := relayed(r1, r2); n == 0 {
		t.Fatalf("the relays answered no key of the proxies' misses (fall-backs %v)", fallbacks())
	}
	if n := relayed(spare); n != 0 {
		t.Fatalf("the spare, not a relay, answered %v keys", n)
	}
	phase("reads through the relays")

	// 2. r1 dies while the proxies read: no read fails; the spare is
	// elected, and they fetch through r2 and the spare without a restart.
	want, last = writeEvicted(t, root, readers, "two/", 30)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for _, px := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := px.client(t)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("two/k%02d", i%30)
				got, err := c.Get(context.Background(), k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
				if err != nil || string(got.Value) != want[k] {
					errs <- fmt.Errorf("%s at %s while a relay died: %q, %v", k, px.Addr["http"], got.Value, err)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // reads under way before the kill (not a timing assertion)
	relays[r1].kill()
	phase(r1 + " killed")
	waitRelays(relayRepl(r2, spare))
	phase("the proxies fetch through the other relay and the newly elected one")
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pollFor(t, "the newly elected relay to say so in its status", func() bool { return isRelay(spare) })
	before := relayed(r2, spare)
	want, last = writeEvicted(t, root, readers, "three/", 30)
	waitIndex(t, relays[r2], last)
	waitIndex(t, relays[spare], last)
	readAll(t, readers, want, last)
	if relayed(r2, spare) <= before {
		t.Fatal("the relays answered nothing after one died")
	}
	phase("reads through the relays left")

	// 3. No relay alive: the proxies fall back to the replicas, counted.
	relays[r2].kill()
	relays[spare].kill()
	phase("the last relays killed")
	waitRelays(nil)
	phase("the proxies have no relay")
	fb := fallbacks()
	want, last = writeEvicted(t, root, readers, "four/", 30)
	readAll(t, readers, want, last)
	if fallbacks() <= fb {
		t.Fatalf("reads with no relay alive were not counted as fall-backs (%v before, %v after)", fb, fallbacks())
	}
	phase("reads from the replicas, counted as fall-backs")
}

// electedRelays are the relays of data centre dc that p's overlay
// member list shows, sorted.
func electedRelays(t *testing.T, p *proc, dc string) []string {
	t.Helper()
	var out struct {
		DCs []struct {
			DC     string   `json:"dc"`
			Relays []string `json:"relays"`
		} `json:"dcs"`
	}
	if err := getJSON("http://"+p.Addr["http"]+"/v1/members", &out); err != nil {
		return nil
	}
	for _, d := range out.DCs {
		if d.DC == dc {
			r := slices.Clone(d.Relays)
			slices.Sort(r)
			return r
		}
	}
	return nil
}

// writeEvicted writes n keys prefix+kNN at root, then pads the log past
// the proxies' window and waits until every proxy applied it and kept
// only its window: reading the keys is then a remote fetch.
func writeEvicted(t *testing.T, root *proc, proxies []*proc, prefix string, n int) (map[string]string, uint64) {
	t.Helper()
	ctx := context.Background()
	rc := root.client(t)
	want := map[string]string{}
	var last uint64
	for i := range n {
		k := fmt.Sprintf("%sk%02d", prefix, i)
		v := strings.Repeat(prefix, 10+i)
		r, err := rc.Put(ctx, k, []byte(v), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[k], last = v, r.Index
	}
	for i := range 10 {
		r, err := rc.Put(ctx, fmt.Sprint("pad", i), []byte(prefix), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Index
	}
	for _, px := range proxies {
		waitIndex(t, px, last)
		pollFor(t, px.Addr["http"]+" to keep only its window", func() bool {
			st, err := px.client(t).Status(ctx)
			return err == nil && st["proxy"].(map[string]any)["cached_values"].(float64) <= 5
		})
	}
	return want, last
}

// waitIndex waits until p applied index.
func waitIndex(t *testing.T, p *proc, index uint64) {
	t.Helper()
	pollFor(t, fmt.Sprintf("%s at index %d", p.Addr["http"], index), func() bool {
		st, err := p.client(t).Status(context.Background())
		if err != nil {
			return false
		}
		a, _ := st["applied_index"].(float64)
		return uint64(a) >= index
	})
}

// readAll reads every key of want through every proxy and checks it.
func readAll(t *testing.T, proxies []*proc, want map[string]string, last uint64) {
	t.Helper()
	for _, px := range proxies {
		c := px.client(t)
		for k, v := range want {
			got, err := c.Get(context.Background(), k, client.ReadOptions{MinIndex: last, Wait: 10 * time.Second})
			if err != nil || string(got.Value) != v {
				t.Fatalf("%s at %s: %q, %v; want %q", k, px.Addr["http"], got.Value, err, v)
			}
		}
	}
}

// getJSON decodes the JSON answer of a GET.
func getJSON(url string, v any) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// sorted returns the names sorted.
func sorted(names ...string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}
