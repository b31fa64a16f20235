package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// tierMetrics is two proxies' exposition: L2 and L3 fetch histograms of
// database "db" (and one of another database, to be left out).
const tierMetrics = `# HELP qs_store_proxy_tier_fetch_seconds x
# TYPE qs_store_proxy_tier_fetch_seconds histogram
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l2",le="0.001"} 90
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l2",le="0.002"} 99
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l2",le="0.004"} 100
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l2",le="+Inf"} 100
qs_store_proxy_tier_fetch_seconds_sum{db="db",tier="l2"} 0.1
qs_store_proxy_tier_fetch_seconds_count{db="db",tier="l2"} 100
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l3",le="0.001"} 0
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l3",le="0.002"} 0
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l3",le="0.004"} 0
qs_store_proxy_tier_fetch_seconds_bucket{db="db",tier="l3",le="+Inf"} 7
qs_store_proxy_tier_fetch_seconds_sum{db="db",tier="l3"} 1
qs_store_proxy_tier_fetch_seconds_count{db="db",tier="l3"} 7
# HELP qs_proxy_fetch_seconds x
# TYPE qs_proxy_fetch_seconds histogram
qs_proxy_fetch_seconds_bucket{db="db",le="0.01"} 1
qs_proxy_fetch_seconds_bucket{db="db",le="0.1"} 10
qs_proxy_fetch_seconds_bucket{db="db",le="+Inf"} 10
qs_proxy_fetch_seconds_sum{db="db"} 0.5
qs_proxy_fetch_seconds_count{db="db"} 10
qs_proxy_fetch_seconds_bucket{db="other",le="0.01"} 1000
qs_proxy_fetch_seconds_bucket{db="other",le="0.1"} 1000
qs_proxy_fetch_seconds_bucket{db="other",le="+Inf"} 1000
qs_proxy_fetch_seconds_sum{db="other"} 0.5
qs_proxy_fetch_seconds_count{db="other"} 1000
`

func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestTierHists: the per-tier histograms are picked by database and
// tier, summed over nodes and differenced over a measurement; each
// quantile is its bucket's bounds.
func TestTierHists(t *testing.T) {
	one := histsOf(parseMetrics(t, tierMetrics), "db", false)
	if one.l2.total() != 100 || one.l3.total() != 10 {
		t.Fatalf("one node: l2 %d, l3 %d values", one.l2.total(), one.l3.total())
	}
	two := one.plus(one)
	if two.l2.total() != 200 || two.l3.total() != 20 {
		t.Fatalf("two nodes: l2 %d, l3 %d values", two.l2.total(), two.l3.total())
	}
	l2 := latencyOf(two.l2)
	if l2.Count != 200 || l2.P50 != 1000 || l2.P99 != 2000 || l2.P99Above != 1000 || l2.P999 != 4000 {
		t.Errorf("l2 of two nodes: %+v", l2)
	}
	if d := two.minus(one); d.l2.total() != 100 || d.l3.total() != 10 {
		t.Errorf("difference: l2 %d, l3 %d", d.l2.total(), d.l3.total())
	}
	if l3 := latencyOf(one.l3); l3.P50 != 100_000 || l3.P99 != 100_000 {
		t.Errorf("l3: %+v", l3)
	}
	// A node that restarted (counts below the earlier sample) adds nothing.
	if d := one.minus(two); d.l2.total() != 0 || latencyOf(d.l2).Count != 0 || latencyOf(d.l2).P99 != 0 {
		t.Errorf("restarted: %+v", latencyOf(d.l2))
	}
	// Beyond the last finite bucket the bound is +Inf.
	inf := bucketHist{bounds: []float64{0.001, math.Inf(1)}, counts: []uint64{0, 5}}
	if lo, hi := inf.bucket(0.5); lo != 0.001 || !math.IsInf(hi, 1) {
		t.Errorf("+Inf bucket: %v..%v", lo, hi)
	}
	if l := latencyOf(inf); l.P99 != beyondBuckets || l.P99Above != 1000 {
		t.Errorf("+Inf bucket: %+v", l)
	}
	if _, err := json.Marshal(latencyOf(inf)); err != nil {
		t.Errorf("beyond the buckets: %v", err)
	}
	// No such family: empty, not an error.
	// With the L2 tier, L3 is the store's tier="l3" histogram.
	if w := histsOf(parseMetrics(t, tierMetrics), "db", true); w.l3.total() != 7 || w.l2.total() != 100 || latencyOf(w.l3).P50 != beyondBuckets {
		t.Errorf("with L2: l3 %d values, %+v", w.l3.total(), latencyOf(w.l3))
	}
	if h := histsOf(parseMetrics(t, "# TYPE x counter\nx 1\n"), "db", false); h.l2.total() != 0 || latencyOf(h.l3).Count != 0 {
		t.Errorf("absent families: %+v", h)
	}
}

// TestL1Bound: L1's quantiles are bounded by all reads' at
// 1-(1-q)·share, and are all reads' own when every read was L1.
func TestL1Bound(t *testing.T) {
	c := newOpCounter()
	for i := 1; i <= 1000; i++ {
		c.add(time.Duration(i)*time.Microsecond, 1, 0)
	}
	all := l1Bound(c.hist, 1)
	if all.Count != 1000 || math.Abs(all.P50-500) > 1 || math.Abs(all.P99-990) > 2 {
		t.Errorf("every read L1: %+v", all)
	}
	// 90% L1: its p50 is at most all reads' p55, its p99 at most p99.1.
	b := l1Bound(c.hist, 0.9)
	if b.Count != 900 || math.Abs(b.P50-550) > 2 || math.Abs(b.P99-991) > 2 {
		t.Errorf("90%% L1: %+v", b)
	}
	if z := l1Bound(c.hist, 0); z.Count != 0 {
		t.Errorf("no L1 read: %+v", z)
	}
	if z := l1Bound(newOpCounter().hist, 1); z.Count != 0 {
		t.Errorf("no read: %+v", z)
	}
}

// TestL2LatencyCheck: the target is met, missed or undecided by where
// the p99's bucket lies against 2 ms.
func TestL2LatencyCheck(t *testing.T) {
	for _, c := range []struct {
		l    TierLatency
		want string
	}{
		{TierLatency{}, "not measured"},
		{TierLatency{Count: 10, P99: 1780, P99Above: 1000}, "≤ 1.78ms over 10 requests (target ≤ 2.00ms): met"},
		{TierLatency{Count: 10, P99: 5620, P99Above: 3160}, "> 3.16ms over 10 requests (target ≤ 2.00ms): NOT met"},
		{TierLatency{Count: 10, P99: 3160, P99Above: 1780}, "between 1.78ms and 3.16ms over 10 requests (target ≤ 2.00ms): undecided"},
	} {
		r := TierRow{Stage: "l2", Workload: WorkloadRegional, L2Latency: c.l}
		if got := l2LatencyCheck(&r); !strings.Contains(got, c.want) || !strings.HasPrefix(got, "regional, stage l2: L2 request p99") {
			t.Errorf("%+v: %q, want %q", c.l, got, c.want)
		}
	}
}
