package storecollector

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// openStore opens a store named name in a new directory, closed when the
// test ends.
func openStore(t *testing.T, name string, o store.Options) *store.Store {
	t.Helper()
	o.Name, o.Dir = name, t.TempDir()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 1
	}
	o.BallastBytes = -1
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func write(t *testing.T, s *store.Store, key string, value []byte) {
	t.Helper()
	if _, err := s.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(key), Value: value}}}); err != nil {
		t.Fatal(err)
	}
}

// gather registers c with a registry of its own and gathers it: the
// registry checks every series against the descriptions and refuses
// duplicates.
func gather(t *testing.T, c *Collector) []*dto.MetricFamily {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(c)
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

// series returns the series of database db, by family name and the
// values of the labels other than db ("name" or "name/label value...").
func series(mfs []*dto.MetricFamily, db string) map[string]*dto.Metric {
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key, ours := mf.GetName(), false
			for _, l := range m.GetLabel() {
				if l.GetName() == "db" {
					ours = l.GetValue() == db
				} else {
					key += "/" + l.GetValue()
				}
			}
			if ours {
				out[key] = m
			}
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	if m == nil {
		return -1
	}
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

// A root store reports the families listed in testdata, with their types
// and help texts: the dashboard and the alert rules name them.
func TestRootStoreFamilies(t *testing.T) {
	t.Parallel()
	s := openStore(t, "families", store.Options{})
	for _, k := range []string{"a", "b", "c"} {
		write(t, s, k, []byte("value of "+k))
	}
	c := New()
	c.Add(s)
	var got []string
	for _, mf := range gather(t, c) {
		got = append(got, mf.GetName()+" "+strings.ToLower(mf.GetType().String())+" "+mf.GetHelp())
	}
	slices.Sort(got)
	b, err := os.ReadFile("testdata/root_families.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("families of a root store:\n got %d %q\nwant %d %q", len(got), got, len(want), want)
	}
}

// The store's counters reach the collector's series under their labels.
func TestStoreCounters(t *testing.T) {
	t.Parallel()
	s := openStore(t, "counters", store.Options{})
	write(t, s, "k", []byte("v"))
	write(t, s, "k", []byte("v")) // changes nothing
	c := New()
	c.Add(s)
	m := series(gather(t, c), "counters")
	for name, want := range map[string]float64{
		"qs_store_entries_total":                        1,
		"qs_store_noop_writes_total":                    1,
		"qs_store_keys":                                 1,
		"qs_store_applied_index":                        float64(s.AppliedIndex()),
		"qs_store_integrity_errors_total/value_crc":     0,
		"qs_store_write_errors_total/disk_full":         0,
		"qs_store_disk_reserve_bytes":                   1,
		"qs_store_log_segment_events_total/created":     s.Metrics().LogSegmentEvents["created"],
		"qs_store_proxy_disk_limited/hard":              0,
		"qs_store_read_cache_lookups_total/hit":         s.Metrics().ReadCacheHits,
		"qs_store_log_blocks_dropped_total/summary":     0,
		"qs_store_retired_log_block_recounts_total":     0,
		"qs_store_engine_write_stall_seconds_total":     0,
		"qs_store_history_log_references_total":         0,
		"qs_store_proxy_cache_budget_bytes":             0,
		"qs_store_log_segment_written_bytes_total":      s.Metrics().LogSegmentBytes,
		"qs_store_engine_background_syncs_total":        s.Metrics().EngineSyncs,
		"qs_store_values_materialized_total":            0,
		"qs_store_snapshots_installed_total":            0,
		"qs_store_duplicate_writes_total":               0,
		"qs_store_entry_time_clamped_total":             0,
		"qs_store_integrity_errors_total/log_value_crc": 0,
	} {
		if got := metricValue(m[name]); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if h := m["qs_store_commit_group_requests"].GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 2 {
		t.Errorf("commit group sizes: %d observations, sum %v; want 2 groups of 1", h.GetSampleCount(), h.GetSampleSum())
	}
}

// The histograms keep the buckets they always had.
func TestHistogramBounds(t *testing.T) {
	t.Parallel()
	m := openStore(t, "bounds", store.Options{}).Metrics()
	for _, c := range []struct {
		name string
		got  []float64
		want []float64
	}{
		{"commit_group_requests", m.CommitGroupRequests.Bounds, prometheus.ExponentialBuckets(1, 2, 13)},
		{"commit_seconds", m.CommitSeconds.Bounds, metrics.LatencyBuckets},
		{"sync_seconds", m.SyncSeconds.Bounds, metrics.LatencyBuckets},
		{"commit_linger_seconds", m.CommitLingerSeconds.Bounds, metrics.LatencyBuckets},
		{"proxy_compaction_seconds", m.ProxyCompactionSeconds.Bounds, metrics.LatencyBuckets},
		{"log_block_bytes", m.LogBlockBytes.Bounds, prometheus.ExponentialBuckets(64, 4, 12)},
		{"log_segment_fsync_seconds", m.LogSegmentFsync.Bounds,
			append(append([]float64(nil), fsyncBounds...), 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: bounds %v, want %v", c.name, c.got, c.want)
		}
	}
}

// Two stores of one name in one process (several nodes in one test) do
// not break the scrape: the first added is reported. A store removed is
// no longer reported.
func TestOneSeriesPerName(t *testing.T) {
	t.Parallel()
	a := openStore(t, "twice", store.Options{})
	b := openStore(t, "twice", store.Options{})
	write(t, b, "k", []byte("v"))
	c := New()
	c.Add(a)
	c.Add(b)
	m := series(gather(t, c), "twice")
	if m["qs_store_engine_wal_bytes_total"] == nil {
		t.Fatal("no engine metrics for two stores of one name")
	}
	if got := metricValue(m["qs_store_entries_total"]); got != 0 {
		t.Errorf("entries %v: the second store reported, want the first", got)
	}
	c.Remove(a)
	if got := metricValue(series(gather(t, c), "twice")["qs_store_entries_total"]); got != 1 {
		t.Errorf("entries %v after the first store left, want the second's 1", got)
	}
	c.Remove(b)
	if m := series(gather(t, c), "twice"); len(m) != 0 {
		t.Errorf("%d series of removed stores", len(m))
	}
}

// A store closed while still added reports its own counters, without the
// engine's (a closed engine is never read).
func TestClosedStoreLeavesEngine(t *testing.T) {
	t.Parallel()
	s := openStore(t, "closed", store.Options{})
	write(t, s, "k", []byte("v"))
	c := New()
	c.Add(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := series(gather(t, c), "closed")
	if m["qs_store_engine_wal_bytes_total"] != nil || m["qs_store_wal_fsync_seconds"] != nil || m["qs_store_disk_avail_bytes"] != nil {
		t.Error("a closed store's engine or disk is still reported")
	}
	if got := metricValue(m["qs_store_entries_total"]); got != 1 {
		t.Errorf("entries of the closed store %v, want 1", got)
	}
}

func TestDiskSpaceMetrics(t *testing.T) {
	t.Parallel()
	s := openStore(t, "diskspace", store.Options{MinFreeBytes: 12345})
	c := New()
	c.Add(s)
	m := series(gather(t, c), "diskspace")
	avail, total := metricValue(m["qs_store_disk_avail_bytes"]), metricValue(m["qs_store_disk_total_bytes"])
	if got := metricValue(m["qs_store_disk_reserve_bytes"]); got != 12345 || total <= 0 || avail <= 0 || avail > total {
		t.Fatalf("disk metrics: reserve %v, avail %v, total %v", got, avail, total)
	}
}

// noUsageFS cannot tell the space of its disk.
type noUsageFS struct{ vfs.FS }

func (noUsageFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{}, errors.New("statfs: input/output error")
}

// A disk whose space cannot be read is left out, not reported as 0 bytes
// free (which an alert would take for a full disk); the engine's figures
// are still there.
func TestDiskSpaceUnreadable(t *testing.T) {
	t.Parallel()
	s := openStore(t, "diskspace-unreadable", store.Options{FS: noUsageFS{vfs.Default}})
	c := New()
	c.Add(s)
	m := series(gather(t, c), "diskspace-unreadable")
	for _, name := range []string{"qs_store_disk_avail_bytes", "qs_store_disk_total_bytes", "qs_store_disk_reserve_bytes"} {
		if m[name] != nil {
			t.Errorf("%s = %v from a disk that cannot tell its space", name, metricValue(m[name]))
		}
	}
	if m["qs_store_engine_wal_bytes_total"] == nil {
		t.Error("no engine metrics")
	}
}

// A root whose clock runs an hour ahead dates its log an hour ahead, which
// replica lag (never below 0) cannot show; the log clock's distance from
// local time does.
func TestLogClockAheadIsReported(t *testing.T) {
	t.Parallel()
	a := openStore(t, "log-clock-ahead", store.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	b := openStore(t, "log-clock-behind", store.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	c := New()
	c.Add(a)
	c.Add(b)
	ahead := func(db string) *dto.Metric { return series(gather(t, c), db)["qs_store_log_clock_ahead_seconds"] }
	if ahead("log-clock-ahead") != nil {
		t.Fatal("reported before any entry was applied")
	}
	write(t, a, "k", []byte("v"))
	write(t, b, "k", []byte("v"))
	if v := metricValue(ahead("log-clock-ahead")); v < 50*60 || v > 70*60 {
		t.Errorf("log clock an hour ahead reported as %v s", v)
	}
	if m := ahead("log-clock-behind"); m == nil || metricValue(m) > -50*60 {
		t.Errorf("log clock an hour behind reported as %v s", metricValue(m))
	}
}

// The process collector reports the stores the server adds.
func TestProcessCollector(t *testing.T) {
	s := openStore(t, "process-collector", store.Options{})
	Stores.Add(s)
	defer Stores.Remove(s)
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if series(mfs, "process-collector")["qs_store_applied_index"] == nil {
		t.Fatal("a store added to Stores is not served by the process registry")
	}
}
