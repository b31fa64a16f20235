package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quicksilver-kv/qs/internal/tree"
)

// haTree starts a replicated root of three members, a replica under
// member 1 with a replica of its own, and a replica under member 2.
func haTree(t *testing.T) *raftCluster {
	t.Helper()
	c := newRaftCluster(t, 3)
	c.startAll()
	c.leader(60 * time.Second)
	a := startQS(t, t.TempDir(), "--node-name", "replica-a", "--upstream", c.members[0].repl)
	startQS(t, t.TempDir(), "--node-name", "replica-a1", "--upstream", a.Addr["repl"])
	startQS(t, t.TempDir(), "--node-name", "replica-b", "--upstream", c.members[1].repl)
	return c
}

// haTreeWant is the shape of the whole cluster's tree: each node's parent
// and depth, the leader on top.
func haTreeWant(leader string) map[string][2]string {
	want := map[string][2]string{
		"replica-a": {"member-1", ""}, "replica-a1": {"replica-a", ""}, "replica-b": {"member-2", ""},
	}
	for _, m := range []string{"member-1", "member-2", "member-3"} {
		if m != leader {
			want[m] = [2]string{leader, ""}
		}
	}
	want[leader] = [2]string{"", "leader"}
	return want
}

func treeAt(addr string) ([]tree.Row, error) {
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/v1/default/tree")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc struct {
		Nodes []tree.Row `json:"nodes"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	return doc.Nodes, err
}

// sameTree reports whether rows have exactly the nodes of want, each
// under its parent, the leader first and marked, the others followers.
func sameTree(rows []tree.Row, want map[string][2]string) bool {
	if len(rows) != len(want) || rows[0].Parent != "" || want[rows[0].Name][1] != "leader" || rows[0].State != "leader" {
		return false
	}
	for _, r := range rows {
		w, ok := want[r.Name]
		if !ok || r.Parent != w[0] || (strings.HasPrefix(r.Name, "member-") && r.Name != rows[0].Name && r.State != "follower") {
			return false
		}
	}
	return true
}

// Every member of a replicated root serves the tree of the whole cluster:
// the members, the leader on top, and the replicas of each member, learned
// from the members themselves. When the leader stops, the new leader goes
// on top and the stopped member shows as unreachable.
func TestHATreeShowsEveryMembersReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("six processes")
	}
	c := haTree(t)
	lead := c.leader(60 * time.Second)
	leader := fmt.Sprint("member-", lead.id)
	want := haTreeWant(leader)
	for _, m := range c.members {
		var rows []tree.Row
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			var err error
			rows, err = treeAt(m.http)
			if err == nil && sameTree(rows, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %d: tree %+v (%v), want %v", m.id, rows, err, want)
			}
		}
	}

	// The leader stops: a new one takes the top; the stopped member stays
	// in the membership, unreachable, with its replica gone from under it.
	lead.p.stop()
	next := c.leader(60 * time.Second)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rows, err := treeAt(next.http)
		unreachable := false
		for _, r := range rows {
			unreachable = unreachable || (r.State == "unreachable" && strings.Contains(r.Name, lead.raft))
		}
		if err == nil && len(rows) > 0 && rows[0].Name == fmt.Sprint("member-", next.id) && rows[0].State == "leader" && unreachable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the leader stopped, member %d shows %+v (%v)", next.id, rows, err)
		}
	}
}

// stateRow is one node of the tree as the page draws it, with its state.
type stateRow struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Depth int    `json:"depth"`
}

const stateRowsJS = `[...document.querySelectorAll('section.db[data-db="default"] tr.tree-node')].map(r => ({
	name: r.dataset.name, state: r.querySelector('.state').textContent, depth: +r.querySelector('.depth').textContent}))`

// The status page of a follower draws the whole cluster's tree: the
// leader first and marked as leader, every member and every replica.
func TestStatusPageShowsTheHATree(t *testing.T) {
	if testing.Short() {
		t.Skip("six processes and a browser")
	}
	ctx := browser(t)
	c := haTree(t)
	lead := c.leader(60 * time.Second)
	follower := c.members[0]
	if follower == lead {
		follower = c.members[1]
	}
	url := "http://" + follower.http + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`section.db[data-db="default"]`))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	leader := fmt.Sprint("member-", lead.id)
	want := map[string]int{leader: 0, "replica-a": 2, "replica-a1": 3, "replica-b": 2}
	for _, m := range c.members {
		if m != lead {
			want[fmt.Sprint("member-", m.id)] = 1
		}
	}
	if lead.id <= 2 { // the leader's own replica hangs right under it
		want[[]string{"replica-a", "replica-b"}[lead.id-1]] = 1
		if lead.id == 1 {
			want["replica-a1"] = 2
		}
	}
	var rows []stateRow
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[[]stateRow](stateRowsJS)); err != nil {
			t.Fatalf("read the page: %v", err)
		}
		ok := len(rows) == len(want) && rows[0].Name == leader && strings.TrimSpace(rows[0].State) == "leader"
		for _, r := range rows {
			d, known := want[r.Name]
			ok = ok && known && d == r.Depth
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("page shows %+v, want %v with %s first as leader", rows, want, leader)
		}
	}
}
