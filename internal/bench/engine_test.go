package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const engineText = `# TYPE qs_store_wal_fsync_seconds histogram
qs_store_wal_fsync_seconds_bucket{db="a",le="0.001"} 90
qs_store_wal_fsync_seconds_bucket{db="a",le="0.003"} 95
qs_store_wal_fsync_seconds_bucket{db="a",le="+Inf"} 100
qs_store_wal_fsync_seconds_sum{db="a"} 0.08
qs_store_wal_fsync_seconds_count{db="a"} 100
qs_store_wal_fsync_seconds_bucket{db="b",le="0.003"} 1
qs_store_wal_fsync_seconds_bucket{db="b",le="+Inf"} 1
qs_store_wal_fsync_seconds_sum{db="b"} 0.001
qs_store_wal_fsync_seconds_count{db="b"} 1
# TYPE qs_store_log_segment_fsync_seconds histogram
qs_store_log_segment_fsync_seconds_bucket{db="a",le="0.001"} 40
qs_store_log_segment_fsync_seconds_bucket{db="a",le="0.003"} 48
qs_store_log_segment_fsync_seconds_bucket{db="a",le="0.005"} 49
qs_store_log_segment_fsync_seconds_bucket{db="a",le="+Inf"} 50
qs_store_log_segment_fsync_seconds_sum{db="a"} 0.04
qs_store_log_segment_fsync_seconds_count{db="a"} 50
# TYPE qs_store_log_segment_written_bytes_total counter
qs_store_log_segment_written_bytes_total{db="a"} 90000
# TYPE qs_store_engine_wal_bytes_total counter
qs_store_engine_wal_bytes_total{db="a"} 4000
qs_store_engine_wal_bytes_total{db="b"} 7
# TYPE qs_store_engine_flushed_bytes_total counter
qs_store_engine_flushed_bytes_total{db="a",kind="blob"} 3000
qs_store_engine_flushed_bytes_total{db="a",kind="table"} 100
# TYPE qs_store_engine_compacted_bytes_total counter
qs_store_engine_compacted_bytes_total{db="a",kind="table"} 50
`

func parseEngine(t *testing.T, text, db string) engineSample {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return engineFrom(mfs, db)
}

func TestEngineFrom(t *testing.T) {
	s := parseEngine(t, engineText, "a")
	// WAL and segment fsyncs together; segment bytes apart.
	want := engineSample{ok: true, fsyncs: 150, fsyncsUnder3ms: 143, fsyncSeconds: 0.12, segment: 90000, wal: 4000, flushed: 3100, compacted: 50}
	if s.fsyncSeconds > 0.1199 && s.fsyncSeconds < 0.1201 {
		s.fsyncSeconds = 0.12
	}
	if s != want {
		t.Errorf("db a: %+v, want %+v", s, want)
	}
	if s := parseEngine(t, engineText, "c"); s.ok {
		t.Errorf("db c, which the server does not have: %+v", s)
	}
	// memcached, or a qs from before the engine metrics: nothing.
	if s := parseEngine(t, "# TYPE go_goroutines gauge\ngo_goroutines 7\n", "a"); s.ok {
		t.Errorf("no engine metrics: %+v", s)
	}
}

func TestEngineBetween(t *testing.T) {
	a := engineSample{ok: true, fsyncs: 100, fsyncsUnder3ms: 95, fsyncSeconds: 0.08, segment: 1000, wal: 4000, flushed: 3100, compacted: 50}
	b := engineSample{ok: true, fsyncs: 300, fsyncsUnder3ms: 285, fsyncSeconds: 0.28, segment: 3000, wal: 12000, flushed: 9100, compacted: 50}
	e, ok := engineBetween(a, b)
	want := PhaseEngine{Fsyncs: 200, FsyncSeconds: 0.2, FsyncsOver3ms: 10, SegmentBytes: 2000, WALBytes: 8000, FlushedBytes: 6000}
	if !ok || e.Fsyncs != want.Fsyncs || e.FsyncsOver3ms != want.FsyncsOver3ms || e.SegmentBytes != want.SegmentBytes ||
		e.WALBytes != want.WALBytes || e.FlushedBytes != want.FlushedBytes || e.CompactedBytes != 0 ||
		e.FsyncSeconds < 0.199 || e.FsyncSeconds > 0.201 {
		t.Errorf("between: %+v, %v; want %+v", e, ok, want)
	}
	if e.Written() != 16000 {
		t.Errorf("written %g", e.Written())
	}
	// A restarted server or a replaced database: counters went back.
	if _, ok := engineBetween(b, a); ok {
		t.Error("counters that went back gave figures")
	}
	if _, ok := engineBetween(b, engineSample{ok: true, fsyncs: 400, fsyncsUnder3ms: 385, segment: 10, wal: 12000, flushed: 9100, compacted: 50}); ok {
		t.Error("counters that went back gave figures")
	}
	if _, ok := engineBetween(engineSample{}, b); ok {
		t.Error("a missing sample gave figures")
	}
	if s := sampleEngine(context.Background(), "", "a"); s.ok {
		t.Error("a target without HTTP gave a sample")
	}
	if s := sampleEngine(context.Background(), "127.0.0.1:1", "a"); s.ok {
		t.Error("an unreachable target gave a sample")
	}
}

// TestEngineFigures: a readlat run against a target whose /metrics has
// engine counters reports them for its phases, and in the report.
func TestEngineFigures(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true)
	b := newFakeTarget(t, "b", false)
	b.t.Baseline = true
	cfg := testConfig()
	cfg.Slices = 2
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t, b.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range res.Phases {
		switch {
		case ph.Target == "b" && ph.Engine != nil:
			t.Errorf("%s/b: engine figures from a target without HTTP: %+v", ph.Name, ph.Engine)
		case ph.Target == "a" && ph.Name == "1 writer":
			e, w := ph.Engine, ph.Op("write")
			if e == nil || w == nil {
				t.Fatalf("1 writer/a: engine %+v, write %+v", e, w)
			}
			// The fake counts one fsync, 1,000 WAL bytes and 500 flushed
			// bytes per set; the 20 keys were loaded before the phase.
			// A set cut off at the end of a slice may be stored but not
			// counted by the writer: one per slice at most.
			n := uint64(w.Ops)
			if e.Fsyncs < n || e.Fsyncs > n+uint64(cfg.Slices) ||
				e.WALBytes != float64(e.Fsyncs*1000) || e.FlushedBytes != float64(e.Fsyncs*500) ||
				e.FsyncsOver3ms > e.Fsyncs/10+uint64(cfg.Slices) {
				t.Errorf("1 writer/a: engine %+v for %d writes", e, w.Ops)
			}
		}
	}
	var buf bytes.Buffer
	rep := &Report{Config: cfg, Results: []Result{*res}}
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "The qs storage engine during each phase") {
		t.Errorf("report without the engine table:\n%s", buf.String())
	}
}
