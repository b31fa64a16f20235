package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// TestMetricsExported pins the names and types an operator's dashboards
// and alerts read, and the series exported before any request: every
// error kind at 0 and a latency histogram per route.
func TestMetricsExported(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]dto.MetricType{
		"qs_http_errors_total":              dto.MetricType_COUNTER,
		"qs_http_request_duration_seconds":  dto.MetricType_HISTOGRAM,
		"qs_http_min_index_wait_seconds":    dto.MetricType_HISTOGRAM,
		"qs_http_min_index_timeouts_total":  dto.MetricType_COUNTER,
		"qs_http_write_timeouts_total":      dto.MetricType_COUNTER,
		"qs_http_answers_streamed_total":    dto.MetricType_COUNTER,
		"qs_http_connections_refused_total": dto.MetricType_COUNTER,
		"qs_http_answers_cut_total":         dto.MetricType_COUNTER,
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	for name, typ := range want {
		if mf := got[name]; mf == nil || mf.GetType() != typ {
			t.Errorf("%s: %v, want type %v", name, mf, typ)
		}
	}
	if len(got) != len(want) { // requests_total appears with the first request
		t.Errorf("%d families exported before any request, want %d", len(got), len(want))
	}
	if n := len(got["qs_http_errors_total"].GetMetric()); n != int(numCodes) {
		t.Errorf("%d error kinds exported, want %d", n, numCodes)
	}
	if n := len(got["qs_http_request_duration_seconds"].GetMetric()); n != int(numRoutes) {
		t.Errorf("%d routes timed, want %d", n, numRoutes)
	}
}

// TestMetricsPerHandler checks that handlers count in the Metrics they are
// given: their own when given none, the shared one otherwise.
func TestMetricsPerHandler(t *testing.T) {
	t.Parallel()
	st := openStore(t, store.Options{})
	cat := service.Databases{"db": {Name: "db", Store: st}}
	get := func(h http.Handler, path string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	}
	own1, own2 := New(Config{}, cat, nil), New(Config{}, cat, nil)
	get(own1, "/v1/nodb/keys/k")
	if n := testutil.ToFloat64(own1.(*handler).m.errorsByCode[codeUnknownDatabase]); n != 1 {
		t.Errorf("unknown_database counted %v, want 1", n)
	}
	if n := testutil.ToFloat64(own2.(*handler).m.errorsByCode[codeUnknownDatabase]); n != 0 {
		t.Errorf("a handler counted the error of another: %v", n)
	}

	shared := NewMetrics()
	h1, h2 := New(Config{Metrics: shared}, cat, nil), New(Config{Metrics: shared}, cat, nil)
	get(h1, "/v1/db/keys/missing")
	get(h2, "/v1/db/keys/missing")
	get(h2, "/no/such/endpoint")
	if n := testutil.ToFloat64(shared.requests.WithLabelValues("db", "get", "404")); n != 2 {
		t.Errorf("shared Metrics counted %v GETs of a missing key, want 2", n)
	}
	if n := testutil.ToFloat64(shared.requests.WithLabelValues("", "other", "404")); n != 1 {
		t.Errorf("shared Metrics counted %v requests of an unknown path, want 1", n)
	}
	if n := testutil.ToFloat64(shared.errorsByCode[codeNotFound]); n != 3 {
		t.Errorf("shared Metrics counted %v not_found errors, want 3", n)
	}
}

// TestStreamErrorLineCounted checks that the error line ending a watch
// stream is counted by its code.
func TestStreamErrorLineCounted(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	out, _ := streamBytes(nil, watch.Update{}, watch.ErrSlow, 3, m)
	if !containsStr(out, watchCodeSlow) {
		t.Fatalf("error line %q", out)
	}
	if n := testutil.ToFloat64(m.errors.WithLabelValues(watchCodeSlow)); n != 1 {
		t.Errorf("too_slow error lines counted %v, want 1", n)
	}
}
