package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// startGossipQS starts a qs serve with the gossip overlay on a
// kernel-chosen port and waits for its four listeners.
func startGossipQS(t *testing.T, name string, extra ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--node-name", name, "--log-level", "warn"}, extra...)
	return startCmd(t, dir, exec.Command(qsBin, args...), 4)
}

// treeStatus is the part of a database's status that places it in the tree.
type treeStatus struct {
	Role       string `json:"role"`
	State      string `json:"state"`
	Source     string `json:"source"`
	Depth      *int   `json:"depth"`
	Children   int    `json:"children"`
	Bootstraps int    `json:"bootstraps"`
	Applied    uint64 `json:"applied_index"`
}

// depthText is a reported depth for a message: the number, or "none".
func depthText(d *int) string {
	if d == nil {
		return "none"
	}
	return strconv.Itoa(*d)
}

func treeStatusOf(p *proc) (treeStatus, error) {
	var st treeStatus
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + p.Addr["http"] + "/v1/default/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// checkTree reads every live node's status and reports why they do not
// (yet) form one tree under root: every replica streaming from a live
// node, no cycle, none over maxChildren, each depth one more than its
// source's. It returns the statuses by node.
func checkTree(root *proc, nodes map[string]*proc, maxChildren int) (map[string]treeStatus, error) {
	byRepl := map[string]string{root.Addr["repl"]: "root"}
	sts := map[string]treeStatus{}
	st, err := treeStatusOf(root)
	if err != nil {
		return nil, err
	}
	sts["root"] = st
	for name, p := range nodes {
		byRepl[p.Addr["repl"]] = name
		st, err := treeStatusOf(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		sts[name] = st
	}
	for name, st := range sts {
		if st.Children > maxChildren {
			return sts, fmt.Errorf("%s has %d children, over %d", name, st.Children, maxChildren)
		}
		if name == "root" {
			continue
		}
		if st.State != "streaming" {
			return sts, fmt.Errorf("%s is %s", name, st.State)
		}
		src, ok := byRepl[st.Source]
		if !ok {
			return sts, fmt.Errorf("%s streams from %s, not a live node", name, st.Source)
		}
		// Follow the sources up: the root within len(nodes) steps.
		hops := 0
		for at := name; at != "root"; at = byRepl[sts[at].Source] {
			if hops++; hops > len(nodes) {
				return sts, fmt.Errorf("%s: cycle through its sources", name)
			}
		}
		if sd := sts[src].Depth; st.Depth == nil || sd == nil || *st.Depth != *sd+1 {
			return sts, fmt.Errorf("%s reports depth %s below %s at depth %s", name, depthText(st.Depth), src, depthText(sd))
		}
	}
	return sts, nil
}

// waitTree polls checkTree until it holds (deadline 90s).
func waitTree(t *testing.T, root *proc, nodes map[string]*proc, maxChildren int, what string) map[string]treeStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		sts, err := checkTree(root, nodes, maxChildren)
		if err == nil {
			return sts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no tree after 90s: %v\nstatuses: %+v", what, err, sts)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDiscoveryTreeFormsAndHeals: one root and eight replicas that know
// only the root's gossip address, each taking at most two children, form
// one tree of at least three tiers by themselves. Killing a depth-1 node
// that has children: its children re-attach elsewhere without a
// bootstrap, the tree stays acyclic with nobody over its limit, and
// writes reach every survivor.
func TestDiscoveryTreeFormsAndHeals(t *testing.T) {
	if testing.Short() {
		t.Skip("nine processes")
	}
	const maxChildren = 2
	root := startGossipQS(t, "root", "--max-children", fmt.Sprint(maxChildren))
	nodes := map[string]*proc{}
	for i := range 8 {
		name := fmt.Sprintf("r%d", i+1)
		nodes[name] = startGossipQS(t, name, "--join", root.Addr["gossip"], "--max-children", fmt.Sprint(maxChildren))
	}
	sts := waitTree(t, root, nodes, maxChildren, "formation")
	deepest := 0
	for _, st := range sts {
		if st.Depth != nil {
			deepest = max(deepest, *st.Depth)
		}
	}
	if deepest < 2 {
		t.Fatalf("8 replicas under a root of 2 children formed only %d tiers below it: %+v", deepest, sts)
	}
	// Each replica's path came down the replication stream.
	for _, p := range nodes {
		awaitMetric(t, p, `qs_discovery_path_streamed{db="default"}`, 1)
	}

	// The members list shows everyone, each replica with its parent
	// (once the advertisements went round).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, code := runQS(t, "members", "--addr", root.Addr["http"])
		if code == 0 && strings.Count(out, "default  replica") == 8 && !strings.Contains(out, "replica  0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qs members (exit %d) after 60s:\n%s", code, out)
		}
	}

	// Kill a depth-1 node with children.
	victim := ""
	for name, st := range sts {
		if name != "root" && st.Depth != nil && *st.Depth == 1 && st.Children > 0 {
			victim = name
		}
	}
	if victim == "" {
		t.Fatalf("no depth-1 node with children: %+v", sts)
	}
	nodes[victim].kill()
	delete(nodes, victim)
	rc := root.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := rc.Put(ctx, "after-kill", []byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sts = waitTree(t, root, nodes, maxChildren, "healing after killing "+victim)
	for name, st := range sts {
		if st.Bootstraps != 0 {
			t.Errorf("%s bootstrapped %d times", name, st.Bootstraps)
		}
	}
	for name, p := range nodes {
		c := p.client(t)
		if _, err := c.Get(ctx, "after-kill", client.ReadOptions{MinIndex: res.Index, Wait: 20 * time.Second}); err != nil {
			t.Errorf("%s: write after the kill not visible: %v", name, err)
		}
	}
}
