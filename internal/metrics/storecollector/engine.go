package storecollector

import (
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/store"
)

// The storage engine's own figures, read from Pebble at every scrape: what
// an operator needs to see where a write's time goes (the WAL's fsyncs),
// how many bytes the engine writes for each byte of values (flushes and
// compactions after the WAL), and whether it falls behind (compaction
// debt, L0 tables, write stalls). Counters start again from zero when a
// bootstrap snapshot replaces the database, which Prometheus reads as a
// counter reset.
var dWALFsync = storeDesc("wal_fsync_seconds",
	"Time of each fsync of the storage engine's write-ahead log: the disk's share of a durable commit (sync_seconds adds the wait for the WAL writer and the memtable insert).")

// engineFigures are the engine's metrics with the sums over its levels.
type engineFigures struct {
	*pebble.Metrics
	tableFlushed, blobFlushed, tableCompacted, blobCompacted uint64
	tables                                                   int64
}

var engineValues = []value[engineFigures]{
	counterOf("engine_wal_bytes_total", "Bytes written to the write-ahead log.",
		func(f *engineFigures) float64 { return float64(f.WAL.BytesWritten) }),
	counterOf("engine_flushes_total", "Memtables flushed to tables and blob files.",
		func(f *engineFigures) float64 { return float64(f.Flush.Count) }),
	counterOf("engine_compactions_total", "Compactions run.",
		func(f *engineFigures) float64 { return float64(f.Compact.Count) }),
	gaugeOf("engine_compaction_debt_bytes", "Estimate of the bytes compactions must still write for the engine to reach a stable shape.",
		func(f *engineFigures) float64 { return float64(f.Compact.EstimatedDebt) }),
	gaugeOf("engine_l0_tables", "Tables in level 0. Many (tens) means compactions fall behind; writes stall at the engine's limit.",
		func(f *engineFigures) float64 { return float64(f.Levels[0].TablesCount) }),
	gaugeOf("engine_l0_sublevels", "Sublevels of level 0: the tables a point read may have to look into there.",
		func(f *engineFigures) float64 { return float64(f.Levels[0].Sublevels) }),
	gaugeOf("engine_tables", "Tables in all levels.",
		func(f *engineFigures) float64 { return float64(f.tables) }),
	gaugeOf("engine_blob_files", "Live blob files (values of 1 KiB and more, kept apart from the tables).",
		func(f *engineFigures) float64 { return float64(f.BlobFiles.LiveCount) }),
	gaugeOf("engine_memtable_bytes", "Memory of the memtables, including those waiting for a flush.",
		func(f *engineFigures) float64 { return float64(f.MemTable.Size) }),
}

var engineLabelled = []labelledValue[engineFigures]{
	labelledOf("engine_flushed_bytes_total", "Bytes written by flushes, to tables (keys, small values) and blob files (values of 1 KiB and more): with the WAL, every value is written twice.", "kind",
		func(f *engineFigures) map[string]float64 {
			return map[string]float64{"table": float64(f.tableFlushed), "blob": float64(f.blobFlushed)}
		}, prometheus.CounterValue),
	labelledOf("engine_compacted_bytes_total", "Bytes written by compactions, to tables and to blob files (values rewritten: a compaction otherwise moves only references to them).", "kind",
		func(f *engineFigures) map[string]float64 {
			return map[string]float64{"table": float64(f.tableCompacted), "blob": float64(f.blobCompacted)}
		}, prometheus.CounterValue),
}

// fsyncBounds are the upper bounds, in seconds, up to 5 ms, of the buckets
// of qs_store_wal_fsync_seconds; above 5 ms every fifth of Pebble's own
// bounds (10.9, 23.6, 51.2 ms, ... 10 s) is kept. All are Pebble's bounds,
// so that each count is exact.
var fsyncBounds = []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.0007, 0.001, 0.0015, 0.002, 0.003, 0.005}

// fsyncEvery is the stride through Pebble's bounds above 5 ms.
const fsyncEvery = 5

func collectEngine(ch chan<- prometheus.Metric, db string, m *pebble.Metrics) {
	f := engineFigures{Metrics: m}
	for _, l := range m.Levels {
		f.tableFlushed += l.TableBytesFlushed
		f.blobFlushed += l.BlobBytesFlushed
		f.tableCompacted += l.TableBytesCompacted
		// Pebble (v2.1) adds a flush's blob files to both its flushed
		// and its compacted bytes; tables it counts once.
		if l.BlobBytesCompacted > l.BlobBytesFlushed {
			f.blobCompacted += l.BlobBytesCompacted - l.BlobBytesFlushed
		}
		f.tables += l.TablesCount
	}
	collectValues(ch, db, &f, engineValues, engineLabelled)
	if h := m.LogWriter.FsyncLatency; h != nil {
		if hm, err := fsyncHistogram(db, h); err == nil {
			ch <- hm
		}
	}
}

// fsyncHistogram converts Pebble's WAL fsync histogram, kept in
// nanoseconds with 100 buckets, to seconds and the buckets of fsyncBounds.
func fsyncHistogram(db string, h prometheus.Histogram) (prometheus.Metric, error) {
	var pb dto.Metric
	if err := h.Write(&pb); err != nil {
		return nil, err
	}
	ph := pb.GetHistogram()
	buckets := make(map[float64]uint64, 2*len(fsyncBounds))
	above := 0 // Pebble's bounds from 5 ms on
	for _, b := range ph.GetBucket() {
		le := b.GetUpperBound() / float64(time.Second)
		last := fsyncBounds[len(fsyncBounds)-1]
		if le >= last || closeTo(le, last) {
			if above%fsyncEvery == 0 {
				buckets[le] = b.GetCumulativeCount()
			}
			above++
			continue
		}
		for _, want := range fsyncBounds {
			if closeTo(le, want) {
				buckets[want] = b.GetCumulativeCount()
			}
		}
	}
	return prometheus.NewConstHistogram(dWALFsync, ph.GetSampleCount(), ph.GetSampleSum()/float64(time.Second), buckets, db)
}

// closeTo compares bucket bounds computed in nanoseconds and divided.
func closeTo(a, b float64) bool { return a > b*0.999999 && a < b*1.000001 }

// The space of the filesystem each store lives on, read at each scrape,
// so that an alert can fire before writes are refused at the reserve.
var diskValues = []value[store.DiskSpace]{
	gaugeOf("disk_avail_bytes", "Free space on the filesystem of the database's directory (for unprivileged users).",
		func(d *store.DiskSpace) float64 { return float64(d.AvailBytes) }),
	gaugeOf("disk_total_bytes", "Size of the filesystem of the database's directory.",
		func(d *store.DiskSpace) float64 { return float64(d.TotalBytes) }),
	gaugeOf("disk_reserve_bytes", "Free space below which writes are refused (min_free_bytes).",
		func(d *store.DiskSpace) float64 { return float64(d.ReserveBytes) }),
}
