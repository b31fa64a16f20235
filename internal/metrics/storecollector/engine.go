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
var (
	dWALFsync = storeDesc("wal_fsync_seconds",
		"Time of each fsync of the storage engine's write-ahead log: the disk's share of a durable commit (sync_seconds adds the wait for the WAL writer and the memtable insert).")
	dWALBytes = storeDesc("engine_wal_bytes_total",
		"Bytes written to the write-ahead log.")
	dFlushes = storeDesc("engine_flushes_total",
		"Memtables flushed to tables and blob files.")
	dFlushBytes = storeDesc("engine_flushed_bytes_total",
		"Bytes written by flushes, to tables (keys, small values) and blob files (values of 1 KiB and more): with the WAL, every value is written twice.", "kind")
	dCompactions = storeDesc("engine_compactions_total",
		"Compactions run.")
	dCompactBytes = storeDesc("engine_compacted_bytes_total",
		"Bytes written by compactions, to tables and to blob files (values rewritten: a compaction otherwise moves only references to them).", "kind")
	dDebt = storeDesc("engine_compaction_debt_bytes",
		"Estimate of the bytes compactions must still write for the engine to reach a stable shape.")
	dL0Tables = storeDesc("engine_l0_tables",
		"Tables in level 0. Many (tens) means compactions fall behind; writes stall at the engine's limit.")
	dL0Sublevels = storeDesc("engine_l0_sublevels",
		"Sublevels of level 0: the tables a point read may have to look into there.")
	dTables = storeDesc("engine_tables",
		"Tables in all levels.")
	dBlobFiles = storeDesc("engine_blob_files",
		"Live blob files (values of 1 KiB and more, kept apart from the tables).")
	dMemtable = storeDesc("engine_memtable_bytes",
		"Memory of the memtables, including those waiting for a flush.")
)

// fsyncBounds are the upper bounds, in seconds, up to 5 ms, of the buckets
// of qs_store_wal_fsync_seconds; above 5 ms every fifth of Pebble's own
// bounds (10.9, 23.6, 51.2 ms, ... 10 s) is kept. All are Pebble's bounds,
// so that each count is exact.
var fsyncBounds = []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.0007, 0.001, 0.0015, 0.002, 0.003, 0.005}

// fsyncEvery is the stride through Pebble's bounds above 5 ms.
const fsyncEvery = 5

func collectEngine(ch chan<- prometheus.Metric, db string, m *pebble.Metrics) {
	counter := func(d *prometheus.Desc, v uint64, kind ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{db}, kind...)...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, db)
	}
	var tableFlushed, blobFlushed, tableCompacted, blobCompacted uint64
	var tables int64
	for _, l := range m.Levels {
		tableFlushed += l.TableBytesFlushed
		blobFlushed += l.BlobBytesFlushed
		tableCompacted += l.TableBytesCompacted
		// Pebble (v2.1) adds a flush's blob files to both its flushed
		// and its compacted bytes; tables it counts once.
		if l.BlobBytesCompacted > l.BlobBytesFlushed {
			blobCompacted += l.BlobBytesCompacted - l.BlobBytesFlushed
		}
		tables += l.TablesCount
	}
	counter(dWALBytes, m.WAL.BytesWritten)
	counter(dFlushes, uint64(m.Flush.Count))
	counter(dFlushBytes, tableFlushed, "table")
	counter(dFlushBytes, blobFlushed, "blob")
	counter(dCompactions, uint64(m.Compact.Count))
	counter(dCompactBytes, tableCompacted, "table")
	counter(dCompactBytes, blobCompacted, "blob")
	gauge(dDebt, float64(m.Compact.EstimatedDebt))
	gauge(dL0Tables, float64(m.Levels[0].TablesCount))
	gauge(dL0Sublevels, float64(m.Levels[0].Sublevels))
	gauge(dTables, float64(tables))
	gauge(dBlobFiles, float64(m.BlobFiles.LiveCount))
	gauge(dMemtable, float64(m.MemTable.Size))
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
var (
	dDiskAvail = storeDesc("disk_avail_bytes",
		"Free space on the filesystem of the database's directory (for unprivileged users).")
	dDiskTotal = storeDesc("disk_total_bytes",
		"Size of the filesystem of the database's directory.")
	dDiskReserve = storeDesc("disk_reserve_bytes",
		"Free space below which writes are refused (min_free_bytes).")
)

func collectDisk(ch chan<- prometheus.Metric, db string, d store.DiskSpace) {
	ch <- prometheus.MustNewConstMetric(dDiskAvail, prometheus.GaugeValue, float64(d.AvailBytes), db)
	ch <- prometheus.MustNewConstMetric(dDiskTotal, prometheus.GaugeValue, float64(d.TotalBytes), db)
	ch <- prometheus.MustNewConstMetric(dDiskReserve, prometheus.GaugeValue, float64(d.ReserveBytes), db)
}

// engineDescs are the families of the engine and the disk.
var engineDescs = []*prometheus.Desc{
	dWALFsync, dWALBytes, dFlushes, dFlushBytes, dCompactions, dCompactBytes, dDebt,
	dL0Tables, dL0Sublevels, dTables, dBlobFiles, dMemtable, dDiskAvail, dDiskTotal, dDiskReserve}
