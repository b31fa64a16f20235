package raftroot

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
)

// Every member answers its peers' asks with its own description, over
// connections authenticated with the cluster key.
func TestDescribeMembersAnswersEachPeer(t *testing.T) {
	key := clusterKey(t, 7)
	c := newCluster(t, 3, func(cfg *Config) {
		withKey(key)(cfg)
		id := cfg.NodeID
		cfg.Describe = func() []byte { return []byte(fmt.Sprintf("member %d", id)) }
	})
	before := counter(t, c.metrics.descriptions, "db", "ok")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := c.members[2].node.DescribeMembers(ctx)
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 3 {
		t.Fatalf("answers %+v, want members 1 and 3", got)
	}
	for _, d := range got {
		if d.Err != nil || string(d.Body) != fmt.Sprintf("member %d", d.ID) || d.Addr != c.peers[d.ID] {
			t.Fatalf("member %d answered %q, %v (address %s)", d.ID, d.Body, d.Err, d.Addr)
		}
	}
	if n := counter(t, c.metrics.descriptions, "db", "ok"); n != before+2 {
		t.Fatalf("descriptions ok %v → %v, want 2 more", before, n)
	}
}

// A stopped member is reported as not answering; the others still answer.
func TestDescribeMembersReportsSilentPeer(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Describe = func() []byte { return []byte("here") }
	})
	c.members[3].stop()
	before := counter(t, c.metrics.descriptions, "db", "failed")
	got := c.members[1].node.DescribeMembers(context.Background())
	if len(got) != 2 || got[0].Err != nil || string(got[0].Body) != "here" || got[1].Err == nil || got[1].Body != nil {
		t.Fatalf("answers %+v: want member 2's and an error for member 3", got)
	}
	if n := counter(t, c.metrics.descriptions, "db", "failed"); n != before+1 {
		t.Fatalf("descriptions failed %v → %v, want 1 more", before, n)
	}
}

// An ask is checked like a message connection's hello: one naming another
// cluster, another addressee or a stranger gets no answer, and each is
// counted; without the cluster key the connection is closed before the
// ask is read.
func TestDescribeRefusesForeignAsks(t *testing.T) {
	key := clusterKey(t, 9)
	c := newCluster(t, 2, func(cfg *Config) {
		withKey(key)(cfg)
		cfg.Describe = func() []byte { return []byte("secret tree") }
	})
	m := c.members[1]
	dialKey := withKeyDial(key, 2)
	for _, tc := range []struct {
		name string
		h    helloMsg
		kind string
	}{
		{"other cluster", helloMsg{cluster: [16]byte{1}, from: 2, to: 1}, kindWrongCluster},
		{"other addressee", helloMsg{cluster: c.dbid, from: 2, to: 5}, kindWrongPeer},
		{"stranger", helloMsg{cluster: c.dbid, from: 9, to: 1}, kindUnknownPeer},
		{"another member's name", helloMsg{cluster: c.dbid, from: 1, to: 1}, kindUnauthorized},
	} {
		before := counter(t, c.metrics.messageErrors, "db", tc.kind)
		body, err := askDescription(context.Background(), m.cfg.Listen, tc.h, dialKey)
		if err == nil {
			t.Fatalf("%s: answered %q", tc.name, body)
		}
		waitCounter(t, c.metrics, tc.kind, before+1)
	}
	var plain net.Dialer
	if body, err := askDescription(context.Background(), m.cfg.Listen, helloMsg{cluster: c.dbid, from: 2, to: 1}, plain.DialContext); err == nil {
		t.Fatalf("answered %q without the cluster key", body)
	}
	if body, err := askDescription(context.Background(), m.cfg.Listen, helloMsg{cluster: c.dbid, from: 2, to: 1}, dialKey); err != nil || string(body) != "secret tree" {
		t.Fatalf("member 2 asked: %q, %v", body, err)
	}
}

// withKeyDial is member id's dialer with key.
func withKeyDial(key clusterauth.Key, id uint64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var cfg Config
	cfg.NodeID = id
	withKey(key)(&cfg)
	return cfg.Dial
}
