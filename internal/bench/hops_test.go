package bench

import (
	"reflect"
	"strings"
	"testing"
)

func TestPerWrite(t *testing.T) {
	c := PhaseCPU{Server: 0.2, Hops: []float64{0.1, 0.05}}
	got := c.PerWrite(1000)
	want := []float64{200, 100, 50}
	for i := range want {
		if i >= len(got) || got[i] < want[i]-1e-9 || got[i] > want[i]+1e-9 {
			t.Fatalf("per write %v µs, want %v", got, want)
		}
	}
	for _, c := range []struct {
		cpu    PhaseCPU
		writes int64
	}{
		{PhaseCPU{Server: 0.2, Hops: []float64{0.1}}, 0},
		{PhaseCPU{Server: 0.2}, 1000},                // not a chain
		{PhaseCPU{Hops: []float64{0.1, 0.05}}, 1000}, // root unknown
	} {
		if got := c.cpu.PerWrite(c.writes); got != nil {
			t.Errorf("%+v over %d writes: %v, want nil", c.cpu, c.writes, got)
		}
	}
}

func TestPhaseAccHops(t *testing.T) {
	var a phaseAcc
	a.addHops([]float64{1, 2})
	a.addHops([]float64{0.5, 0.25})
	if a.hopsLost || !reflect.DeepEqual(a.hops, []float64{1.5, 2.25}) {
		t.Fatalf("two slices: %v (lost %v)", a.hops, a.hopsLost)
	}
	a.addHops(nil) // a process could not be read
	a.addHops([]float64{1, 1})
	if !a.hopsLost {
		t.Errorf("a slice without the hops' CPU left a sum: %v", a.hops)
	}
	var b phaseAcc // a target that heads no chain
	b.addHops(nil)
	b.addHops(nil)
	if b.hopsLost || b.hops != nil {
		t.Errorf("no chain: %v (lost %v)", b.hops, b.hopsLost)
	}
}

func TestHopRows(t *testing.T) {
	phase := func(target string, base bool, writes int64, root float64, hops ...float64) Phase {
		return Phase{
			Name: "2 hops", Target: target, Baseline: base,
			Ops: []OpStats{{Op: "write", Ops: writes}, {Op: "visible", Ops: writes}},
			CPU: PhaseCPU{Server: root, Hops: hops, Ops: 2 * writes},
		}
	}
	r := &Result{Phases: []Phase{
		phase("qs chain", false, 1000, 1.0, 0.4, 0.3),
		phase("redis chain", true, 1000, 0.3, 0.1, 0.1),
		{Name: "2 hops", Target: "other", Ops: []OpStats{{Op: "get", Ops: 5}}},
	}}
	if got, want := hopHeader(r), []string{"phase", "target", "root", "hop 1", "hop 2", "chain", "vs base"}; !reflect.DeepEqual(got, want) {
		t.Errorf("header %v, want %v", got, want)
	}
	rows := hopRows(r)
	if len(rows) != 2 {
		t.Fatalf("rows %v: want the two chains", rows)
	}
	qs, redis := strings.Join(rows[0], "|"), strings.Join(rows[1], "|")
	if qs != "2 hops|qs chain|1.00ms|400.0µs|300.0µs|1.70ms|3.40" {
		t.Errorf("qs row %q", qs)
	}
	if redis != "2 hops|redis chain (base)|300.0µs|100.0µs|100.0µs|500.0µs|-" {
		t.Errorf("baseline row %q", redis)
	}
	if rows := hopRows(&Result{Phases: []Phase{phase("qs", false, 100, 1)}}); rows != nil {
		t.Errorf("a target heading no chain: %v", rows)
	}
}
