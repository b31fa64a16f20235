package raftroot

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A member removed from the membership while it runs says so: its status
// has removed=true and qs_raft_removed is 1 (so that its server answers
// /healthz 503 and it gets no more reads); the members that stay do not.
func TestRemovedMemberReportsIt(t *testing.T) {
	c := newSimCluster(t, 3, 41, nil)
	lead := c.leader()
	c.mustWrite(lead, "before", "v")
	c.converge()
	var gone *simMember
	for _, m := range c.others(lead) {
		gone = m
	}
	if gone.node.Removed() {
		t.Fatal("a member reports itself removed before it was")
	}
	done := make(chan error, 1)
	go func() { done <- lead.node.RemoveMember(context.Background(), gone.id) }()
	for i := 0; i < 1000; i++ {
		c.stabilize()
		c.tick(1)
		if gone.node.Status().Removed {
			break
		}
	}
	c.tick(5)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := gone.node.Status(); !s.Removed || !gone.node.Removed() {
		t.Fatalf("removed member's status %+v, Removed %v", s, gone.node.Removed())
	}
	for _, m := range c.running() {
		if m != gone && m.node.Removed() {
			t.Fatalf("member %d, still a member, reports itself removed", m.id)
		}
	}
	// The gauge is the process's: the members that stay share it here;
	// stopped, they leave it to the removed member's next status update.
	for _, m := range c.others(gone) {
		m.stop()
	}
	gone.node.updateStatusFromLoop(context.Background())
	var m dto.Metric
	if err := c.metrics.removed.WithLabelValues("db").Write(&m); err != nil || m.GetGauge().GetValue() != 1 {
		t.Fatalf("qs_raft_removed %v (%v), want 1", m.GetGauge().GetValue(), err)
	}
}

// The policy: a member is removed when a membership that has members
// leaves it out; an empty one (a joining member's) removes no one.
func TestIsRemoved(t *testing.T) {
	cases := []struct {
		name string
		cs   *pb.ConfState
		want bool
	}{
		{"no membership yet", nil, false},
		{"empty membership (joining)", &pb.ConfState{}, false},
		{"a voter", &pb.ConfState{Voters: []uint64{1, 2, 3}}, false},
		{"a learner", &pb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}, false},
		{"leaving in a joint change", &pb.ConfState{Voters: []uint64{1, 2}, VotersOutgoing: []uint64{1, 2, 3}}, false},
		{"removed", &pb.ConfState{Voters: []uint64{1, 2}}, true},
	}
	for _, tc := range cases {
		if got := isRemoved(tc.cs, 3); got != tc.want {
			t.Errorf("%s: isRemoved = %v, want %v", tc.name, got, tc.want)
		}
	}
}
