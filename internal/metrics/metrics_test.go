package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGroup: a Group registers as one collector and exports every member;
// a member registered twice through two groups is refused.
func TestGroup(t *testing.T) {
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})
	b := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "b", Help: "b"}, []string{"x"})
	a.Add(2)
	b.WithLabelValues("y").Set(3)
	r := prometheus.NewRegistry()
	r.MustRegister(Group{a, b})
	if n, err := testutil.GatherAndCount(r); err != nil || n != 2 {
		t.Fatalf("gathered %d series (%v), want 2", n, err)
	}
	if n, err := testutil.GatherAndCount(r, "a_total"); err != nil || n != 1 {
		t.Fatalf("a_total: %d series (%v)", n, err)
	}
	if err := r.Register(Group{a}); err == nil {
		t.Fatal("a collector registered twice through two groups")
	}
}
