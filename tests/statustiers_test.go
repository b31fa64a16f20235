package tests

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// nodeTiers reads the cache tiers of the first database on p's status
// page (GET /v1/node), by name: hits and lookups; nil if unreadable.
func nodeTiers(p *proc) (map[string][2]uint64, int) {
	code, body, err := httpGet(p.Addr["http"], "/v1/node")
	if err != nil || code != 200 {
		return nil, 0
	}
	var doc struct {
		Databases []struct {
			History []json.RawMessage `json:"history"`
			Tiers   []struct {
				Name    string `json:"name"`
				Hits    uint64 `json:"hits"`
				Lookups uint64 `json:"lookups"`
			} `json:"tiers"`
		} `json:"databases"`
	}
	if json.Unmarshal([]byte(body), &doc) != nil || len(doc.Databases) == 0 {
		return nil, 0
	}
	out := map[string][2]uint64{}
	for _, tr := range doc.Databases[0].Tiers {
		out[tr.Name] = [2]uint64{tr.Hits, tr.Lookups}
	}
	return out, len(doc.Databases[0].History)
}

// TestStatusPageTiersOfAProxy: the status page's cache tiers of a proxy
// count its reads, sampled from the store's own counters: three reads
// of a key the proxy holds are three lookups of its store (disk tier) and
// of its read cache (memory tier).
func TestStatusPageTiersOfAProxy(t *testing.T) {
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	px := startQS(t, filepath.Join(dir, "proxy"), "--upstream", root.Addr["repl"], "--role", "proxy", "--replicas", root.Addr["repl"])
	ctx := context.Background()
	res, err := root.client(t).Put(ctx, "a", []byte("value of a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Tiers count what changed between the status page's samples: read
	// once the proxy has taken its first.
	pollFor(t, "the proxy's first status sample", func() bool {
		_, points := nodeTiers(px)
		return points > 0
	})
	pc, err := client.New([]string{px.Addr["http"]}, client.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, err := pc.Get(ctx, "a", client.ReadOptions{MinIndex: res.Index}); err != nil || string(v.Value) != "value of a" {
			t.Fatalf("read through the proxy: %+v %v", v, err)
		}
	}
	var tiers map[string][2]uint64
	pollFor(t, "the proxy's tiers to count the reads", func() bool {
		tiers, _ = nodeTiers(px)
		return tiers["disk"][1] >= 3 && tiers["memory"][1] >= 3
	})
	if d := tiers["disk"]; d[0] != d[1] {
		t.Fatalf("disk tier %d hits of %d lookups: the proxy holds the key", d[0], d[1])
	}
	if r, ok := tiers["replicas"]; !ok || r[1] != 0 {
		t.Fatalf("replicas tier %v: nothing was fetched", r)
	}
}
