package storecollector

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// engineSeries converts the metrics of a Pebble instance, by name and
// kind ("name/kind").
func engineSeries(t *testing.T, m *pebble.Metrics) map[string]*dto.Metric {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(engineOnly{m})
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return series(mfs, "db")
}

// engineOnly collects the engine's families of database db alone (an
// unchecked collector: the Collector's own test checks the descriptions).
type engineOnly struct{ m *pebble.Metrics }

func (engineOnly) Describe(chan<- *prometheus.Desc) {}

func (e engineOnly) Collect(ch chan<- prometheus.Metric) { collectEngine(ch, "db", e.m) }

func TestEngineMetrics(t *testing.T) {
	t.Parallel()
	// Values of 1 KiB and more in blob files, as the store keeps them;
	// every write synced, so that the WAL's fsyncs are measured.
	o := &pebble.Options{FormatMajorVersion: pebble.FormatNewest}
	o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{Enabled: true, MinimumSize: 1024, MaxBlobReferenceDepth: 10}
	}
	db, err := pebble.Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const writes = 20
	rng := rand.New(rand.NewSource(1))
	for i := range writes {
		v := make([]byte, 40<<10) // incompressible
		rng.Read(v)
		if err := db.Set(fmt.Appendf(nil, "k%d", i), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	m := engineSeries(t, db.Metrics())

	h := m["qs_store_wal_fsync_seconds"].GetHistogram()
	if h.GetSampleCount() < writes || h.GetSampleSum() <= 0 {
		t.Errorf("WAL fsyncs: %d, %.6f s after %d durable writes", h.GetSampleCount(), h.GetSampleSum(), writes)
	}
	var last uint64
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() < last || b.GetCumulativeCount() > h.GetSampleCount() {
			t.Errorf("bucket le=%g holds %d (previous %d, total %d)", b.GetUpperBound(), b.GetCumulativeCount(), last, h.GetSampleCount())
		}
		last = b.GetCumulativeCount()
	}
	if n := len(h.GetBucket()); n < len(fsyncBounds)+5 {
		t.Errorf("%d buckets, want the %d up to 5 ms and more above", n, len(fsyncBounds))
	}
	if got := h.GetBucket()[0].GetUpperBound(); got != fsyncBounds[0] {
		t.Errorf("first bucket le=%g, want %g s (Pebble counts nanoseconds)", got, fsyncBounds[0])
	}

	for name, min := range map[string]float64{
		"qs_store_engine_wal_bytes_total":           writes * 40 << 10,
		"qs_store_engine_flushes_total":             1,
		"qs_store_engine_flushed_bytes_total/blob":  writes * 40 << 10,
		"qs_store_engine_flushed_bytes_total/table": 1,
		"qs_store_engine_tables":                    1,
		"qs_store_engine_blob_files":                1,
	} {
		mm := m[name]
		if mm == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if v := mm.GetCounter().GetValue() + mm.GetGauge().GetValue(); v < min {
			t.Errorf("%s = %g, want at least %g", name, v, min)
		}
	}
	for _, name := range []string{"qs_store_engine_compactions_total", "qs_store_engine_compacted_bytes_total/table", "qs_store_engine_compacted_bytes_total/blob",
		"qs_store_engine_compaction_debt_bytes", "qs_store_engine_l0_tables", "qs_store_engine_l0_sublevels",
		"qs_store_engine_memtable_bytes"} {
		if m[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
	// A flush writes its values once: none counted as compacted too.
	if v := m["qs_store_engine_compacted_bytes_total/blob"].GetCounter().GetValue(); v != 0 {
		t.Errorf("compacted blob bytes %g after a flush and no compaction", v)
	}
}
