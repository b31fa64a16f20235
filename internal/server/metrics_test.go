package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/metrics/metricstest"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/repl"
)

// privateMeters are meters registered nowhere, for a Server of a test
// that reads what it counted.
func privateMeters() meters {
	return meters{server: NewMetrics(), proxy: proxy.NewMetrics(), auth: clusterauth.NewMetrics()}
}

// TestServersCountApart: two Servers of one process, each with its own
// meters, count apart: a report one refuses and a key reload that fails
// on it are counted in its Metrics only.
func TestServersCountApart(t *testing.T) {
	a, _ := startNode(t, "apart-a", "")
	b, _ := startNode(t, "apart-b", "")
	if err := a.reports.receive("default", repl.NewProcessID(), []byte(`{`)); err == nil {
		t.Fatal("an invalid report accepted")
	}
	if got := testutil.ToFloat64(a.meters.server.reportsInvalid.WithLabelValues("invalid")); got != 1 {
		t.Fatalf("the refusing server counted %v invalid reports, want 1", got)
	}
	if fams := metricstest.Families(t, b.meters.server); fams["qs_tree_reports_invalid_total"] != nil {
		t.Fatalf("the other server counted a report it never received: %v", fams["qs_tree_reports_invalid_total"])
	}

	b.cfg.ClusterKey = "/nonexistent/cluster.key"
	if err := b.ReloadKeys(); err == nil {
		t.Fatal("a reload of a missing cluster key file succeeded")
	}
	if got := testutil.ToFloat64(b.meters.auth.ReloadErrors()); got != 1 {
		t.Fatalf("the server whose reload failed counted %v failures, want 1", got)
	}
	if got := testutil.ToFloat64(a.meters.auth.ReloadErrors()); got != 0 {
		t.Fatalf("the other server counted %v failed reloads", got)
	}
}

// TestMetricsExportTheirFamilies: a Server's Metrics are a collector of
// every family it counts, under the names, types and labels /metrics
// serves.
func TestMetricsExportTheirFamilies(t *testing.T) {
	m := NewMetrics()
	m.sourceWaiting.WithLabelValues("d").Set(1)
	m.sourceWaitFailures.WithLabelValues("d").Inc()
	m.expired.WithLabelValues("d").Add(3)
	m.expiryFailures.WithLabelValues("d").Inc()
	m.bridgedEntries.WithLabelValues("d").Inc()
	m.bridgedRefused.WithLabelValues("d").Inc()
	m.treeNodes.WithLabelValues("d").Set(2)
	m.reportsInvalid.WithLabelValues("invalid").Inc()
	m.memberDescriptionsInvalid.WithLabelValues("d").Inc()
	m.readSamples.WithLabelValues("d", "local").Inc()
	m.windowKeys.WithLabelValues("d").Set(5)
	m.windowDropped.WithLabelValues("d").Inc()
	want := map[string]string{
		"qs_server_source_waiting":                  "GAUGE",
		"qs_server_source_wait_failures_total":      "COUNTER",
		"qs_expiry_deleted_total":                   "COUNTER",
		"qs_expiry_failures_total":                  "COUNTER",
		"qs_bridged_entries_total":                  "COUNTER",
		"qs_bridged_not_contiguous_total":           "COUNTER",
		"qs_tree_nodes":                             "GAUGE",
		"qs_tree_reports_invalid_total":             "COUNTER",
		"qs_tree_member_descriptions_invalid_total": "COUNTER",
		"qs_keyuse_samples_total":                   "COUNTER",
		"qs_keyuse_window_keys":                     "GAUGE",
		"qs_keyuse_window_dropped_total":            "COUNTER",
	}
	fams := metricstest.Families(t, m)
	if len(fams) != len(want) {
		t.Errorf("%d families, want %d", len(fams), len(want))
	}
	for name, typ := range want {
		if f := fams[name]; f == nil || f.GetType().String() != typ {
			t.Errorf("%s: %v, want a %s", name, f.GetType(), typ)
		}
	}
}
