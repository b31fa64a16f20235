package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A member removed from an HA root's membership while it runs reports it:
// its status says "removed": true, qs_raft_removed is 1 and /healthz
// answers 503 (so that a load balancer sends it no reads of data that no
// longer follows the root); the members that stay answer 200.
func TestRaftRemovedMemberUnhealthy(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.startAll()
	lead := c.leader(60 * time.Second)
	var gone *raftMember
	for _, m := range c.members {
		if m != lead {
			gone = m
		}
	}
	hc := http.Client{Timeout: 30 * time.Second}
	get := func(addr, path string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(gone.http, "/healthz"); st != 200 {
		t.Fatalf("member %d before its removal: /healthz %d %q", gone.id, st, body)
	}
	req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("http://%s/v1/default/raft/members/%d", lead.http, gone.id), nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("removing member %d: %d %s", gone.id, resp.StatusCode, b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, body := get(gone.http, "/healthz")
		if st == http.StatusServiceUnavailable && strings.Contains(body, "removed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("removed member %d: /healthz %d %q after 60s", gone.id, st, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var status struct {
		Raft struct {
			Removed bool `json:"removed"`
		} `json:"raft"`
	}
	if st, body := get(gone.http, "/v1/default/status"); st != 200 || json.Unmarshal([]byte(body), &status) != nil || !status.Raft.Removed {
		t.Fatalf("removed member's status: %d %s", st, body)
	}
	if st, body := get(gone.http, "/metrics"); st != 200 || !strings.Contains(body, `qs_raft_removed{db="default"} 1`) {
		t.Fatalf("removed member's metrics: %d, no qs_raft_removed 1", st)
	}
	for _, m := range c.members {
		if m == gone {
			continue
		}
		if st, body := get(m.http, "/healthz"); st != 200 {
			t.Fatalf("member %d, still a member: /healthz %d %q", m.id, st, body)
		}
		if _, body := get(m.http, "/metrics"); !strings.Contains(body, `qs_raft_removed{db="default"} 0`) {
			t.Fatalf("member %d, still a member: qs_raft_removed is not 0", m.id)
		}
	}
}
