package store

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

// engineSeries returns the metrics of database db among those the
// registry gathers, by name.
func engineSeries(t *testing.T, db string) map[string]*dto.Metric {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if hasLabel(m.GetLabel(), "db", db) {
				name := mf.GetName()
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" {
						name += "/" + l.GetValue()
					}
				}
				out[name] = m
			}
		}
	}
	return out
}

func TestEngineMetrics(t *testing.T) {
	const db = "engine-metrics-test"
	// Blocks in Pebble (as in Raft and proxy stores): each commit syncs
	// its WAL, and the flush writes the values to blob files.
	s := openTest(t, Options{Name: db, blocksInPebble: true})
	const writes = 20
	for i := 0; i < writes; i++ {
		mustWrite(t, s, setb(fmt.Sprintf("k%d", i), pattern(i, 40<<10))) // incompressible
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	m := engineSeries(t, db)

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
		v := mm.GetCounter().GetValue() + mm.GetGauge().GetValue()
		if v < min {
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

	// A closed store leaves the report; scraping after it is safe.
	s.Close()
	m = engineSeries(t, db)
	if m["qs_store_engine_wal_bytes_total"] != nil || m["qs_store_wal_fsync_seconds"] != nil {
		t.Error("a closed store is still reported")
	}
}

// TestEngineMetricsOneSeriesPerName: two stores of one name in one process
// (several nodes in one test) must not break the scrape.
func TestEngineMetricsOneSeriesPerName(t *testing.T) {
	const db = "engine-metrics-twice"
	openTest(t, Options{Name: db})
	openTest(t, Options{Name: db})
	if m := engineSeries(t, db); m["qs_store_engine_wal_bytes_total"] == nil {
		t.Error("no engine metrics for two stores of one name")
	}
}

func TestWriteStallMetrics(t *testing.T) {
	const db = "engine-stall-test"
	l := stallListener(db)
	stalls := mWriteStalls.WithLabelValues(db)
	seconds := mWriteStallSeconds.WithLabelValues(db)
	n0, s0 := counterValue(t, stalls), counterValue(t, seconds)
	l.WriteStallEnd() // an end without a begin counts nothing
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	l.WriteStallEnd()
	if n := counterValue(t, stalls) - n0; n != 1 {
		t.Errorf("stalls +%g, want +1", n)
	}
	if v := counterValue(t, seconds) - s0; v <= 0 || v > 1 {
		t.Errorf("stall seconds +%g", v)
	}
}

func TestDiskSpaceMetrics(t *testing.T) {
	s, err := Open(Options{Name: "diskspace", Dir: t.TempDir(), MinFreeBytes: 12345, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]float64{}
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "db" && l.GetValue() == "diskspace" && m.GetGauge() != nil {
					got[mf.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if got["qs_store_disk_reserve_bytes"] != 12345 || got["qs_store_disk_total_bytes"] <= 0 ||
		got["qs_store_disk_avail_bytes"] <= 0 || got["qs_store_disk_avail_bytes"] > got["qs_store_disk_total_bytes"] {
		t.Fatalf("disk metrics: %v", got)
	}
}
