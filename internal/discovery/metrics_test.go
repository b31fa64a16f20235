package discovery

import (
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two overlays in one process count in their own Metrics: each sees the
// two members and its own gossip, and a third Metrics nobody uses stays
// at zero.
func TestOverlaysCountApart(t *testing.T) {
	t.Parallel()
	ma, mb, unused := NewMetrics(), NewMetrics(), NewMetrics()
	a, err := Start(Config{NodeName: "a", Bind: "127.0.0.1:0", ProbeInterval: 100 * time.Millisecond, Log: testLog(t), Metrics: ma}, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Leave(time.Second) })
	b, err := Start(Config{NodeName: "b", Bind: "127.0.0.1:0", Join: []string{a.Addr()}, ProbeInterval: 100 * time.Millisecond, Log: testLog(t), Metrics: mb}, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Leave(time.Second) })

	deadline := time.Now().Add(60 * time.Second)
	for testutil.ToFloat64(ma.members) != 2 || testutil.ToFloat64(mb.members) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("members: a %v, b %v after 60s, want 2 each", testutil.ToFloat64(ma.members), testutil.ToFloat64(mb.members))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, m := range map[string]*Metrics{"a": ma, "b": mb} {
		for _, dir := range []string{"in", "out"} {
			if v := testutil.ToFloat64(m.gossipBytes.WithLabelValues(dir)); v <= 0 {
				t.Errorf("%s: gossip_bytes_total{direction=%q} = %v, want > 0", name, dir, v)
			}
		}
	}
	a.DC("db", "dc1")
	if n := testutil.CollectAndCount(ma.dcRelays); n != 1 {
		t.Errorf("a: %d dc_relays series after DC, want 1", n)
	}
	if n := testutil.CollectAndCount(mb.dcRelays); n != 0 {
		t.Errorf("b: %d dc_relays series after a's DC, want 0", n)
	}
	if n := testutil.CollectAndCount(unused); n != 4 {
		t.Errorf("unused Metrics exports %d series, want the 4 plain ones", n)
	}
	if v := testutil.ToFloat64(unused.members); v != 0 {
		t.Errorf("unused Metrics counts %v members", v)
	}
}

// A Metrics registers as one collector and exports the names and types
// the dashboards and alert rules read.
func TestMetricsNames(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.gossipBytes.WithLabelValues("in")
	m.sourceChanges.WithLabelValues("db", string(ReasonInitial))
	m.sourceRTT.WithLabelValues("db")
	m.depth.WithLabelValues("db")
	m.setDC("db", 1, true)
	m.checks.WithLabelValues("answered")
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.GetName()+" "+f.GetType().String())
	}
	sort.Strings(got)
	want := []string{
		"qs_discovery_bad_meta_total COUNTER",
		"qs_discovery_dc_relays GAUGE",
		"qs_discovery_dependency_probes_total COUNTER",
		"qs_discovery_depth GAUGE",
		"qs_discovery_gossip_bytes_total COUNTER",
		"qs_discovery_members GAUGE",
		"qs_discovery_meta_databases_dropped GAUGE",
		"qs_discovery_relay GAUGE",
		"qs_discovery_source_changes_total COUNTER",
		"qs_discovery_source_rtt_seconds GAUGE",
		"qs_discovery_suspect_members GAUGE",
	}
	if len(got) != len(want) {
		t.Fatalf("families %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("families %v, want %v", got, want)
		}
	}
}
