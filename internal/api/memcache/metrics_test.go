package memcache

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsExported: a registered Metrics exports the qs_memcache_*
// families with their types, every command and error kind from the start
// (at 0), and nothing else.
func TestMetricsExported(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewMetrics())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]dto.MetricType{
		"qs_memcache_requests_total":           dto.MetricType_COUNTER,
		"qs_memcache_errors_total":             dto.MetricType_COUNTER,
		"qs_memcache_request_duration_seconds": dto.MetricType_HISTOGRAM,
		"qs_memcache_connections":              dto.MetricType_GAUGE,
		"qs_memcache_connections_total":        dto.MetricType_COUNTER,
		"qs_memcache_idle_evictions_total":     dto.MetricType_COUNTER,
		"qs_memcache_thread_connections":       dto.MetricType_GAUGE,
		"qs_memcache_loop_connections":         dto.MetricType_GAUGE,
		"qs_memcache_loop_handoffs_total":      dto.MetricType_COUNTER,
		"qs_memcache_read_nice":                dto.MetricType_GAUGE,
		"qs_memcache_thread_slice_seconds":     dto.MetricType_GAUGE,
		"qs_memcache_get_hits_total":           dto.MetricType_COUNTER,
		"qs_memcache_get_misses_total":         dto.MetricType_COUNTER,
	}
	wantSeries := map[string]int{
		"qs_memcache_requests_total":           int(numCommands),
		"qs_memcache_request_duration_seconds": int(numCommands),
		"qs_memcache_errors_total":             int(numErrKinds),
	}
	if len(fams) != len(want) {
		t.Errorf("%d families exported, want %d", len(fams), len(want))
	}
	for _, f := range fams {
		typ, ok := want[f.GetName()]
		if !ok {
			t.Errorf("unexpected family %s", f.GetName())
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s is a %v, want a %v", f.GetName(), f.GetType(), typ)
		}
		n, ok := wantSeries[f.GetName()]
		if !ok {
			n = 1
		}
		if len(f.GetMetric()) != n {
			t.Errorf("%s has %d series, want %d", f.GetName(), len(f.GetMetric()), n)
		}
	}
}

// TestMetricsPerServer: a server without Config.Metrics counts in a
// Metrics of its own; servers given one Metrics count in it together.
// Each protocol's get counts hits and misses, every request its command,
// and every connection once.
func TestMetricsPerServer(t *testing.T) {
	t.Parallel()
	b := newFakeBackend()
	b.put("a", "1")
	own := New(Config{}, b, nil)
	shared := NewMetrics()
	s1 := New(Config{Metrics: shared}, b, nil)
	s2 := New(Config{Metrics: shared}, b, nil)

	runConn(t, own, "get a b\r\nbogus\r\n", 0)
	runConn(t, s1, "get a b\r\ngets a\r\n", 0)
	runConn(t, s2, "mg a v\r\nmg b v\r\n"+binReq(opGet, "a", "", "", 0, 1)+binReq(opGet, "b", "", "", 0, 2), 0)

	for _, tc := range []struct {
		name string
		got  prometheus.Counter
		want float64
	}{
		{"own get_hits_total", own.m.getHitsTotal, 1},
		{"own get_misses_total", own.m.getMissesTotal, 1},
		{"own requests_total{cmd=get}", own.m.requestsByCmd[cmdGet], 1},
		{"own requests_total{cmd=invalid}", own.m.requestsByCmd[cmdInvalid], 1},
		{"own errors_total{kind=bad_command}", own.m.errorsByKind[kindBadCommand], 1},
		{"own connections_total", own.m.connectionsTotal, 1},
		{"shared get_hits_total", shared.getHitsTotal, 1 + 1 + 1 + 1},
		{"shared get_misses_total", shared.getMissesTotal, 1 + 1 + 1},
		{"shared requests_total{cmd=get}", shared.requestsByCmd[cmdGet], 1 + 2},
		{"shared requests_total{cmd=gets}", shared.requestsByCmd[cmdGets], 1},
		{"shared requests_total{cmd=mg}", shared.requestsByCmd[cmdMetaGet], 2},
		{"shared requests_total{cmd=invalid}", shared.requestsByCmd[cmdInvalid], 0},
		{"shared errors_total{kind=bad_command}", shared.errorsByKind[kindBadCommand], 0},
		{"shared connections_total", shared.connectionsTotal, 2},
	} {
		if got := counterValue(tc.got); got != tc.want {
			t.Errorf("%s %v, want %v", tc.name, got, tc.want)
		}
	}
	if own.m == shared || s1.m != shared || s2.m != shared {
		t.Fatal("servers count in the wrong Metrics")
	}
	for _, m := range []*Metrics{own.m, shared} {
		if g := gaugeValue(t, m.connectionsOpen); g != 0 {
			t.Errorf("connections %v after every connection closed, want 0", g)
		}
		var h dto.Metric
		if err := m.secondsByCmd[cmdGet].(prometheus.Histogram).Write(&h); err != nil {
			t.Fatal(err)
		}
		if n, want := h.GetHistogram().GetSampleCount(), uint64(counterValue(m.requestsByCmd[cmdGet])); n != want {
			t.Errorf("request_duration_seconds{cmd=get} has %d samples, want %d", n, want)
		}
	}
}
