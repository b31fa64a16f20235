package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

// The storage engine's own figures, read from Pebble at every scrape: what
// an operator needs to see where a write's time goes (the WAL's fsyncs),
// how many bytes the engine writes for each byte of values (flushes and
// compactions after the WAL), and whether it falls behind (compaction
// debt, L0 tables, write stalls). Counters start again from zero when a
// bootstrap snapshot replaces the database, which Prometheus reads as a
// counter reset.
var (
	engine = metrics.MustRegister(&engineCollector{stores: map[*Store]struct{}{}, descs: []*prometheus.Desc{
		dWALFsync, dWALBytes, dFlushes, dFlushBytes, dCompactions, dCompactBytes, dDebt,
		dL0Tables, dL0Sublevels, dTables, dBlobFiles, dMemtable, dDiskAvail, dDiskTotal, dDiskReserve}})

	mWriteStalls = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "engine_write_stalls_total",
		Help: "Times the storage engine held writes back (too many memtables or L0 tables waiting for a flush or compaction)."}, []string{"db"}))
	mWriteStallSeconds = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "engine_write_stall_seconds_total",
		Help: "Time writes were held back by the storage engine."}, []string{"db"}))
)

func engineDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, name), help, append([]string{"db"}, labels...), nil)
}

var (
	dWALFsync = engineDesc("wal_fsync_seconds",
		"Time of each fsync of the storage engine's write-ahead log: the disk's share of a durable commit (sync_seconds adds the wait for the WAL writer and the memtable insert).")
	dWALBytes = engineDesc("engine_wal_bytes_total",
		"Bytes written to the write-ahead log.")
	dFlushes = engineDesc("engine_flushes_total",
		"Memtables flushed to tables and blob files.")
	dFlushBytes = engineDesc("engine_flushed_bytes_total",
		"Bytes written by flushes, to tables (keys, small values) and blob files (values of 1 KiB and more): with the WAL, every value is written twice.", "kind")
	dCompactions = engineDesc("engine_compactions_total",
		"Compactions run.")
	dCompactBytes = engineDesc("engine_compacted_bytes_total",
		"Bytes written by compactions, to tables and to blob files (values rewritten: a compaction otherwise moves only references to them).", "kind")
	dDebt = engineDesc("engine_compaction_debt_bytes",
		"Estimate of the bytes compactions must still write for the engine to reach a stable shape.")
	dL0Tables = engineDesc("engine_l0_tables",
		"Tables in level 0. Many (tens) means compactions fall behind; writes stall at the engine's limit.")
	dL0Sublevels = engineDesc("engine_l0_sublevels",
		"Sublevels of level 0: the tables a point read may have to look into there.")
	dTables = engineDesc("engine_tables",
		"Tables in all levels.")
	dBlobFiles = engineDesc("engine_blob_files",
		"Live blob files (values of 1 KiB and more, kept apart from the tables).")
	dMemtable = engineDesc("engine_memtable_bytes",
		"Memory of the memtables, including those waiting for a flush.")
)

// fsyncBounds are the upper bounds, in seconds, up to 5 ms, of the buckets
// of qs_store_wal_fsync_seconds; above 5 ms every fifth of Pebble's own
// bounds (10.9, 23.6, 51.2 ms, ... 10 s) is kept. All are Pebble's bounds,
// so that each count is exact.
var fsyncBounds = []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.0007, 0.001, 0.0015, 0.002, 0.003, 0.005}

// fsyncEvery is the stride through Pebble's bounds above 5 ms.
const fsyncEvery = 5

// engineCollector reports the engine metrics of every open store. Stores
// register at open and leave at close, which waits for a scrape under way,
// so that a closed Pebble instance is never asked for its metrics (Pebble
// defines no use of a DB after Close).
type engineCollector struct {
	descs  []*prometheus.Desc
	mu     sync.Mutex
	stores map[*Store]struct{}
}

func (c *engineCollector) add(s *Store) {
	c.mu.Lock()
	c.stores[s] = struct{}{}
	c.mu.Unlock()
}

func (c *engineCollector) remove(s *Store) {
	c.mu.Lock()
	delete(c.stores, s)
	c.mu.Unlock()
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// One series per database name: in a process that opened two stores
	// of one name (tests with several nodes in one process), the first
	// wins, since a registry refuses duplicates.
	seen := map[string]bool{}
	for s := range c.stores {
		if seen[s.opts.Name] {
			continue
		}
		seen[s.opts.Name] = true
		s.engine.RLock()
		m := s.db.Metrics()
		s.engine.RUnlock()
		collectEngine(ch, s.opts.Name, m)
		collectDisk(ch, s)
	}
}

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

// stallListener counts the engine's write stalls of database db.
func stallListener(db string) *pebble.EventListener {
	stalls, seconds := mWriteStalls.WithLabelValues(db), mWriteStallSeconds.WithLabelValues(db)
	var mu sync.Mutex
	var began time.Time
	return &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			mu.Lock()
			began = time.Now()
			mu.Unlock()
			stalls.Inc()
		},
		WriteStallEnd: func() {
			mu.Lock()
			if !began.IsZero() {
				seconds.Add(time.Since(began).Seconds())
				began = time.Time{}
			}
			mu.Unlock()
		},
	}
}
