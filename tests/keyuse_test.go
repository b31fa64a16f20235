package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestUnreadKeysAcrossTheTree: keys read only on a leaf, two levels below
// the root, are known to the root as read (the leaf's samples travel up
// through the intermediate's reports); a key nobody reads is reported
// unread by qs usage --unread at the root. A replica refuses the question
// and names the root.
func TestUnreadKeysAcrossTheTree(t *testing.T) {
	root := startQS(t, t.TempDir(), "--node-name", "ku-root")
	mid := startQS(t, t.TempDir(), "--node-name", "ku-mid", "--upstream", root.Addr["repl"])
	leaf := startQS(t, t.TempDir(), "--node-name", "ku-leaf", "--upstream", mid.Addr["repl"])
	ctx := context.Background()
	rc, lc := root.client(t), leaf.client(t)
	var last uint64
	for _, k := range []string{"hot/a", "cold/b"} {
		r, err := rc.Put(ctx, k, []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Index
	}
	// One read in 64 is sampled: 3,000 reads are sampled with certainty
	// ((63/64)^3000 < 1e-20).
	for i := 0; i < 3000; i++ {
		if _, err := lc.Get(ctx, "hot/a", client.ReadOptions{MinIndex: last, Wait: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	type unread struct {
		Unowned struct {
			Keys       int64    `json:"keys"`
			UnreadKeys []string `json:"unread_keys"`
		} `json:"unowned"`
	}
	url := "http://" + root.Addr["http"] + "/v1/default/usage?unread=true&window=1h"
	var got unread
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		got = unread{}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", url, resp.StatusCode, err)
		}
		if got.Unowned.Keys == 2 && slices.Equal(got.Unowned.UnreadKeys, []string{"cold/b"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the root did not learn the leaf's reads within 60s: %+v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}

	out, code := runQS(t, "usage", "--addr", root.Addr["http"], "--unread", "--window", "1h")
	if code != 0 || !strings.Contains(out, `"cold/b"`) || strings.Contains(out, `"hot/a"`) || !strings.Contains(out, "one read in 64") {
		t.Errorf("qs usage --unread (exit %d):\n%s", code, out)
	}
	out, code = runQS(t, "usage", "--addr", mid.Addr["http"], "--unread")
	if code == 0 || !strings.Contains(out, "ask the root at http://"+root.Addr["http"]) || strings.Contains(out, `{"error"`) {
		t.Errorf("qs usage --unread at a replica (exit %d):\n%s", code, out)
	}
	out, code = runQS(t, "usage", "--addr", root.Addr["http"], "--window", "1h")
	if code == 0 || !strings.Contains(out, "--unread") {
		t.Errorf("qs usage --window without --unread (exit %d):\n%s", code, out)
	}
}
