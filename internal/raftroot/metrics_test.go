package raftroot

import (
	"net"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsExported pins the names and types that dashboards and alert
// rules read: a running cluster exports them from the Metrics its members
// share, every series labelled with the database.
func TestMetricsExported(t *testing.T) {
	m := NewMetrics()
	descs := make(chan *prometheus.Desc, 64)
	m.Describe(descs)
	close(descs)
	if len(descs) != 18 {
		t.Errorf("%d collectors described, want 18", len(descs))
	}
	for d := range descs {
		if !strings.Contains(d.String(), `fqName: "qs_raft_`) {
			t.Errorf("collector outside qs_raft_: %v", d)
		}
	}

	c := newCluster(t, 3, nil)
	c.writeAt(c.leader(), put("k", "v"))
	c.waitConverged()
	want := map[string]dto.MetricType{
		"qs_raft_leader_changes_total":    dto.MetricType_COUNTER,
		"qs_raft_is_leader":               dto.MetricType_GAUGE,
		"qs_raft_removed":                 dto.MetricType_GAUGE,
		"qs_raft_term":                    dto.MetricType_GAUGE,
		"qs_raft_commit_index":            dto.MetricType_GAUGE,
		"qs_raft_applied_index":           dto.MetricType_GAUGE,
		"qs_raft_apply_lag_entries":       dto.MetricType_GAUGE,
		"qs_raft_log_entries":             dto.MetricType_GAUGE,
		"qs_raft_storage_bytes":           dto.MetricType_GAUGE,
		"qs_raft_proposals_total":         dto.MetricType_COUNTER,
		"qs_raft_messages_sent_total":     dto.MetricType_COUNTER,
		"qs_raft_messages_received_total": dto.MetricType_COUNTER,
		"qs_raft_persist_seconds":         dto.MetricType_HISTOGRAM,
		"qs_raft_apply_seconds":           dto.MetricType_HISTOGRAM,
	}
	got := metricstest.Families(t, c.metrics)
	for name, typ := range want {
		if mf := got[name]; mf == nil || mf.GetType() != typ {
			t.Errorf("%s: %v, want type %v", name, mf, typ)
		}
	}
	for name, mf := range got {
		for _, s := range mf.GetMetric() {
			if db := s.GetLabel()[0]; db.GetName() != "db" || db.GetValue() != "db" {
				t.Errorf("%s: series %v, want the label db=\"db\" first", name, s.GetLabel())
			}
		}
	}
	if v := counter(t, c.metrics.proposals, "db", "ok"); v != 1 {
		t.Errorf("proposals ok %v, want 1 (the one write)", v)
	}
}

// Members counting in different Metrics do not see each other's events: a
// bad frame sent to one cluster is counted there only.
func TestMetricsCountPerInstance(t *testing.T) {
	a, b := newCluster(t, 1, nil), newCluster(t, 1, nil)
	conn, err := net.Dial("tcp", a.members[1].cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if got := sendRaw(t, conn, []byte{frameHello, 0x06, 0x40, 0x00, 0x00, 'Q', 'S', 'R', 'T'}); len(got) != 0 {
		t.Fatalf("answered %q", got)
	}
	if got := counter(t, a.metrics.messageErrors, "db", kindBadFrame); got != 1 {
		t.Fatalf("bad frames of the member sent one: %v, want 1", got)
	}
	if n := testutil.CollectAndCount(b.metrics.messageErrors); n != 0 {
		t.Fatalf("the other member has %d transport error series, want none", n)
	}
}
