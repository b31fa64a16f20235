package watch

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/store"
)

// gather registers m with a registry of its own and gathers it: the
// registry checks every series against the descriptions and refuses
// duplicates.
func gather(t *testing.T, m *Metrics) []*dto.MetricFamily {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(m)
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

// TestMetricsFamilies: the families of a hub in use are those listed in
// testdata (name, labels, type and help text, as /metrics serves them:
// the dashboard and the alert rules name them), histograms with the
// latency buckets.
func TestMetricsFamilies(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	st := openStore(t, store.Options{Name: "default"})
	h, _ := startHub(t, st, Config{Metrics: m})
	s, err := h.Subscribe(nil, st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for _, mf := range gather(t, m) {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		name := mf.GetName()
		if len(labels) > 0 {
			name += "{" + strings.Join(labels, ",") + "}"
		}
		got = append(got, name+" "+strings.ToLower(mf.GetType().String())+" "+mf.GetHelp())
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		var bounds []float64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		if !slices.Equal(bounds, metrics.LatencyBuckets) {
			t.Errorf("%s buckets %v, want the latency buckets", mf.GetName(), bounds)
		}
	}
	slices.Sort(got)
	b, err := os.ReadFile("testdata/families.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("families of a hub in use:\n got %d %q\nwant %d %q", len(got), got, len(want), want)
	}
}

// TestMetricsStartAtZero: before any hub, the unlabelled series and every
// cut reason and budget decision are there, at 0; the series of a
// database appear with its hub.
func TestMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	n := 0
	for _, mf := range gather(t, m) {
		for _, s := range mf.GetMetric() {
			n++
			for _, l := range s.GetLabel() {
				if l.GetName() == "db" {
					t.Errorf("%s has a series of database %q without a hub", mf.GetName(), l.GetValue())
				}
			}
			if v := s.GetCounter().GetValue() + s.GetGauge().GetValue() + float64(s.GetHistogram().GetSampleCount()); v != 0 {
				t.Errorf("%s %v at %v, want 0", mf.GetName(), s.GetLabel(), v)
			}
		}
	}
	// 12 unlabelled series, 3 cut reasons, 5 decisions.
	if want := 12 + 3 + len(decisions); n != want {
		t.Errorf("%d series before any hub, want %d", n, want)
	}
	if got := testutil.CollectAndCount(m, "qs_watch_subscribers_cut_total"); got != 3 {
		t.Errorf("%d cut reasons, want 3", got)
	}
}

// TestMetricsShared: the hubs sharing a budget count in the budget's
// Metrics, each database under its name; a hub given no budget and no
// Metrics counts in one of its own, and one given Metrics but no budget
// has its own budget count there too.
func TestMetricsShared(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	b := NewBudget(Limits{MaxWatchers: 2}, m)
	ha, _ := startHub(t, openStore(t, store.Options{Name: "a"}), Config{Budget: b})
	hb, _ := startHub(t, openStore(t, store.Options{Name: "b"}), Config{Budget: b})
	alone, _ := startHub(t, openStore(t, store.Options{Name: "alone"}), Config{})
	m2 := NewMetrics()
	given, _ := startHub(t, openStore(t, store.Options{Name: "given"}), Config{Metrics: m2})
	if ha.metrics != m || hb.metrics != m {
		t.Fatal("hubs sharing a budget do not count in its Metrics")
	}
	if alone.metrics == m || alone.metrics == nil || alone.budget.metrics != alone.metrics {
		t.Fatal("a hub without budget or Metrics does not count in one of its own")
	}
	if given.metrics != m2 || given.budget.metrics != m2 {
		t.Fatal("a hub given Metrics but no budget: its own budget counts elsewhere")
	}
	for _, h := range []*Hub{ha, hb, alone, given} {
		s, err := h.Subscribe(nil, h.st.AppliedIndex())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		u, err := s.Next(ctx, 0) // a progress update, in a write turn
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		s.Delivered(u, time.Now())
	}
	if _, err := ha.Subscribe(nil, 0); err == nil {
		t.Fatal("a third watcher of a budget of 2")
	}
	for _, c := range []struct {
		m    *Metrics
		db   string
		want float64
	}{{m, "a", 1}, {m, "b", 1}, {m, "alone", 0}, {alone.metrics, "alone", 1}, {m2, "given", 1}, {m, "given", 0}} {
		if got := testutil.ToFloat64(c.m.watchers.WithLabelValues(c.db)); got != c.want {
			t.Errorf("watchers of %s: %v, want %v", c.db, got, c.want)
		}
	}
	for _, c := range []struct {
		name            string
		m               *Metrics
		writes, refused float64
	}{{"shared", m, 2, 1}, {"own", alone.metrics, 1, 0}, {"given", m2, 1, 0}} {
		if got := testutil.ToFloat64(c.m.writes); got != c.writes {
			t.Errorf("%s: writes_total %v, want %v", c.name, got, c.writes)
		}
		if got := testutil.ToFloat64(c.m.refused); got != c.refused {
			t.Errorf("%s: refused_total %v, want %v", c.name, got, c.refused)
		}
		h := &dto.Metric{}
		if err := c.m.turnWait.Write(h); err != nil {
			t.Fatal(err)
		}
		if got := h.GetHistogram().GetSampleCount(); float64(got) != c.writes {
			t.Errorf("%s: %d turns waited for, want %v", c.name, got, c.writes)
		}
	}
}
