package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestReplicationTree runs a root, an intermediate replicating from it and
// a leaf replicating from the intermediate (with the root as secondary),
// as real processes. Writes at the root are readable on the leaf at the
// acknowledged index with the same data; the leaf refuses writes naming its
// upstream; killing the intermediate moves the leaf to its secondary; a
// restarted intermediate continues without re-applying anything.
func TestReplicationTree(t *testing.T) {
	root := startQS(t, t.TempDir())
	midDir := t.TempDir()
	mid := startQS(t, midDir, "--upstream", root.Addr["repl"])
	leaf := startQS(t, t.TempDir(), "--upstream", mid.Addr["repl"], "--secondary", root.Addr["repl"])
	rc, lc := root.client(t), leaf.client(t)
	ctx := context.Background()

	var last client.WriteResult
	for i := 0; i < 50; i++ {
		var err error
		last, err = rc.Put(ctx, fmt.Sprintf("k%02d", i), []byte(fmt.Sprintf("v%d", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rc.Delete(ctx, "k07", nil); err != nil {
		t.Fatal(err)
	}
	last, _ = rc.Put(ctx, "k00", []byte("changed"), nil)
	// Read-your-writes on the leaf, two hops down.
	v, err := lc.Get(ctx, "k00", client.ReadOptions{MinIndex: last.Index, Wait: 10 * time.Second})
	if err != nil || string(v.Value) != "changed" || v.Index != last.Index {
		t.Fatalf("leaf read: %+v %v", v, err)
	}
	assertSameContent(t, rc, lc, last.Index)

	if _, err := lc.Put(ctx, "x", []byte("y"), nil); err == nil {
		t.Fatal("a replica accepted a write")
	} else if e := (*client.Error)(nil); !errors.As(err, &e) || e.Code != "not_root" {
		t.Fatalf("write on a replica: %v", err)
	}
	st, err := lc.Status(ctx)
	if err != nil || st["role"] != "replica" || st["state"] != "streaming" {
		t.Fatalf("leaf status: %v %v", st, err)
	}

	// The intermediate dies: the leaf continues from the root.
	mid.kill()
	last, _ = rc.Put(ctx, "after-kill", []byte("1"), nil)
	if v, err := lc.Get(ctx, "after-kill", client.ReadOptions{MinIndex: last.Index, Wait: 45 * time.Second}); err != nil || string(v.Value) != "1" {
		t.Fatalf("leaf after its upstream died: %+v %v", v, err)
	}
	// The intermediate comes back on its data and catches up.
	mid = startQS(t, midDir, "--upstream", root.Addr["repl"])
	last, _ = rc.Put(ctx, "after-restart", []byte("2"), nil)
	if v, err := mid.client(t).Get(ctx, "after-restart", client.ReadOptions{MinIndex: last.Index, Wait: 10 * time.Second}); err != nil || string(v.Value) != "2" {
		t.Fatalf("restarted intermediate: %+v %v", v, err)
	}
	assertSameContent(t, rc, mid.client(t), last.Index)
	leaf.stop()
	mid.stop()
	root.stop()
}

// assertSameContent compares every key, value and index of two nodes, both
// read at least at index.
func assertSameContent(t *testing.T, a, b *client.Client, index uint64) {
	t.Helper()
	ctx := context.Background()
	ro := client.ReadOptions{MinIndex: index, Wait: 10 * time.Second}
	pa, err := a.Scan(ctx, "", "", 10000, ro)
	if err != nil {
		t.Fatal(err)
	}
	ro.MinIndex = pa.Index
	pb, err := b.Scan(ctx, "", "", 10000, ro)
	if err != nil {
		t.Fatal(err)
	}
	if pa.Index != pb.Index && pb.Index > pa.Index {
		// b moved on (heartbeats): re-read a at b's index.
		ro.MinIndex = pb.Index
		if pa, err = a.Scan(ctx, "", "", 10000, ro); err != nil {
			t.Fatal(err)
		}
	}
	if len(pa.Items) != len(pb.Items) {
		t.Fatalf("%d keys vs %d keys", len(pa.Items), len(pb.Items))
	}
	for i := range pa.Items {
		x, y := pa.Items[i], pb.Items[i]
		if x.Key != y.Key || string(x.Value) != string(y.Value) || x.Index != y.Index {
			t.Fatalf("item %d differs: %+v vs %+v", i, x, y)
		}
	}
}

// TestWatchOnLeaf watches a prefix on a leaf and sees a write made at the
// root, with its index, then a delete.
func TestWatchOnLeaf(t *testing.T) {
	root := startQS(t, t.TempDir())
	leaf := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	rc := root.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+leaf.Addr["http"]+"/v1/default/watch?prefix=cfg/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("watch: %s", resp.Status)
	}
	lines := bufio.NewScanner(resp.Body)
	w1, err := rc.Put(ctx, "cfg/a", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rc.Put(ctx, "other", []byte("x"), nil)
	w2, err := rc.Delete(ctx, "cfg/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		Index    uint64 `json:"index"`
		Key      string `json:"key"`
		Value    []byte `json:"value"`
		Deleted  bool   `json:"deleted"`
		Progress bool   `json:"progress"`
	}
	var got []event
	for len(got) < 2 && lines.Scan() {
		var e event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("bad line %q: %v", lines.Text(), err)
		}
		if !e.Progress {
			got = append(got, e)
		}
	}
	if len(got) != 2 || got[0].Index != w1.Index || got[0].Key != "cfg/a" || string(got[0].Value) != "1" ||
		got[1].Index != w2.Index || !got[1].Deleted {
		t.Fatalf("events %+v, want set at %d and delete at %d", got, w1.Index, w2.Index)
	}
	cancel()
	leaf.stop()
	root.stop()
}
