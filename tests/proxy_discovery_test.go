package tests

import (
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
)

// TestProxiesFindRelaysThroughOverlay: a root, two full replicas, two
// proxies of data centre "a" that the overlay elects relays, and two
// proxies that know only a gossip seed and their data centre (they have
// no replication listener, so they are never elected). The proxies fetch
// their misses through the relays; when a relay dies they take up the
// other without a restart and no read fails; with no relay alive they
// fall back to the replicas, and those fetches are counted.
func TestProxiesFindRelaysThroughOverlay(t *testing.T) {
	start := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	root := startGossipQS(t, "root", "--dc", "b")
	seed := root.Addr["gossip"]
	startGossipQS(t, "replica-1", "--join", seed, "--dc", "a")
	startGossipQS(t, "replica-2", "--join", seed, "--dc", "b")
	cache := []string{"--role", "proxy", "--cache-bytes", "1", "--window", "5"}
	relays := map[string]*proc{}
	for _, name := range []string{"relay-1", "relay-2"} {
		relays[name] = startGossipQS(t, name, append([]string{"--join", seed, "--dc", "a"}, cache...)...)
	}
	pollFor(t, "both proxies of data centre a elected relays", func() bool {
		return slices.Equal(electedRelays(t, root, "a"), []string{"relay-1", "relay-2"})
	})
	var readers []*proc
	for i := range 2 {
		dir := t.TempDir()
		args := append([]string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "off",
			"--gossip", "127.0.0.1:0", "--node-name", fmt.Sprint("proxy-", i), "--log-level", "warn", "--join", seed, "--dc", "a"}, cache...)
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
	waitRelays := func(want []string) {
		t.Helper()
		for _, px := range readers {
			pollFor(t, fmt.Sprintf("%s to fetch through relays %v", px.Addr["http"], want), func() bool {
				st, err := px.client(t).Status(context.Background())
				if err != nil {
					return false
				}
				if st["proxy"].(map[string]any)["members_source"] != "discovery" {
					t.Fatalf("proxy status without members_source discovery: %v", st["proxy"])
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
	waitRelays(relayRepl("relay-1", "relay-2"))
	phase("the proxies fetch through both elected relays")
	for name, p := range relays {
		st, err := p.client(t).Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st["cache"].(map[string]any)["relay"] != true || st["proxy"].(map[string]any)["members_source"] != "discovery" {
			t.Fatalf("%s: status of an elected relay %v %v", name, st["cache"], st["proxy"])
		}
	}

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
	for _, name := range []string{"relay-1", "relay-2"} {
		waitIndex(t, relays[name], last)
	}
	readAll(t, readers, want, last)
	if n := relayed("relay-1", "relay-2"); n == 0 {
		t.Fatalf("the relays answered no key of the proxies' misses (fall-backs %v)", fallbacks())
	}
	phase("reads through the relays")

	// 2. relay-1 dies while the proxies read: no read fails, and they
	// fetch through relay-2 without a restart.
	want, last = writeEvicted(t, root, readers, "two/", 30)
	waitIndex(t, relays["relay-2"], last)
	before := relayed("relay-2")
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
	relays["relay-1"].kill()
	phase("relay-1 killed")
	waitRelays(relayRepl("relay-2"))
	phase("the proxies fetch through relay-2 alone")
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want, last = writeEvicted(t, root, readers, "three/", 30)
	waitIndex(t, relays["relay-2"], last)
	readAll(t, readers, want, last)
	if relayed("relay-2") <= before {
		t.Fatal("relay-2 answered nothing after relay-1 died")
	}

	// 3. No relay alive: the proxies fall back to the replicas, counted.
	relays["relay-2"].kill()
	phase("relay-2 killed")
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
