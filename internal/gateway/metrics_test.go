package gateway

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// openWith opens a gateway on content that counts in m.
func openWith(t *testing.T, m *Metrics, content string) (*Gateway, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "producers.toml")
	writeFile(t, path, content)
	g, err := Open(Options{Path: path, PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return g, path
}

// TestMetricsExported pins the names and types an operator's dashboards
// and alerts read, and checks that a producer removed by a reload loses its
// series.
func TestMetricsExported(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	g, path := openWith(t, m, fmt.Sprintf("[[producer]]\nname = \"kept\"\ntokens = [%q]\nprefixes = [\"\"]\n[[producer]]\nname = \"gone\"\ntokens = [%q]\nprefixes = [\"k/\"]\n", hashA, hashB))
	a, _ := g.Authenticate("Bearer " + tokA)
	if err := a.Admit(t.Context(), 2, 30); err != nil {
		t.Fatal(err)
	}
	b, _ := g.Authenticate("Bearer " + tokB)
	if err := b.Authorize("default", ops("x/1")); err == nil {
		t.Fatal("key outside the prefixes admitted")
	}
	g.Authenticate("")
	g.RefuseMemcacheWrite()

	want := map[string]dto.MetricType{
		"qs_gateway_requests_total":        dto.MetricType_COUNTER,
		"qs_gateway_ops_total":             dto.MetricType_COUNTER,
		"qs_gateway_bytes_total":           dto.MetricType_COUNTER,
		"qs_gateway_rejections_total":      dto.MetricType_COUNTER,
		"qs_gateway_throttle_wait_seconds": dto.MetricType_HISTOGRAM,
		"qs_gateway_producers":             dto.MetricType_GAUGE,
		"qs_gateway_reloads_total":         dto.MetricType_COUNTER,
	}
	got := metricstest.Families(t, m)
	for name, typ := range want {
		if mf := got[name]; mf == nil || mf.GetType() != typ {
			t.Errorf("%s: %v, want type %v", name, mf, typ)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d families exported, want %d", len(got), len(want))
	}
	if n := testutil.ToFloat64(m.ops.WithLabelValues("kept")); n != 2 {
		t.Errorf("ops of kept = %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.bytes.WithLabelValues("kept")); n != 30 {
		t.Errorf("bytes of kept = %v, want 30", n)
	}
	for reason, want := range map[string]float64{reasonUnauthenticated: 1, reasonMemcache: 1, reasonInvalidToken: 0} {
		if n := testutil.ToFloat64(m.rejections.WithLabelValues("", reason)); n != want {
			t.Errorf("rejections %s = %v, want %v", reason, n, want)
		}
	}
	if n := testutil.ToFloat64(m.producers); n != 2 {
		t.Errorf("producers = %v, want 2", n)
	}

	writeFile(t, path, fmt.Sprintf("[[producer]]\nname = \"kept\"\ntokens = [%q]\nprefixes = [\"\"]\n", hashA))
	if changed, err := g.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if n := testutil.ToFloat64(m.producers); n != 1 {
		t.Errorf("producers after the reload = %v, want 1", n)
	}
	if n := testutil.ToFloat64(m.reloadsOK); n != 2 {
		t.Errorf("successful loads = %v, want 2", n)
	}
	for _, mf := range metricstest.Families(t, m) {
		for _, s := range mf.GetMetric() {
			if slices.ContainsFunc(s.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "producer" && l.GetValue() == "gone" }) {
				t.Errorf("%s keeps a series of the removed producer", mf.GetName())
			}
		}
	}
	if n := testutil.ToFloat64(m.ops.WithLabelValues("kept")); n != 2 {
		t.Errorf("ops of kept after the reload = %v, want 2 (the series survives)", n)
	}
}

// TestMetricsPerInstance checks that gateways count in the Metrics they
// are given: their own when given none, the shared one otherwise.
func TestMetricsPerInstance(t *testing.T) {
	t.Parallel()
	file := fmt.Sprintf("[[producer]]\nname = \"p\"\ntokens = [%q]\nprefixes = [\"\"]\n", hashA)
	own1, _ := openGateway(t, file)
	own2, _ := openGateway(t, file)
	own1.Authenticate("")
	if n := testutil.ToFloat64(own2.m.rejectedUnauthenticated); n != 0 {
		t.Errorf("a gateway counted the refusal of another: %v", n)
	}
	if own1.m == own2.m {
		t.Error("two gateways given no Metrics share one")
	}

	shared := NewMetrics()
	g1, _ := openWith(t, shared, file)
	g2, _ := openWith(t, shared, file)
	g1.Authenticate("Bearer nope")
	g2.Authenticate("Bearer nope")
	if n := testutil.ToFloat64(shared.rejectedInvalidToken); n != 2 {
		t.Errorf("shared Metrics counted %v invalid tokens, want 2", n)
	}
	if n := testutil.ToFloat64(shared.reloadsOK); n != 2 {
		t.Errorf("shared Metrics counted %v loads, want 2", n)
	}
}
