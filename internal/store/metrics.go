package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// storeMetrics are the instruments of one store (instruments.go). Each
// store owns its own; (*Store).Metrics reads them.
type storeMetrics struct {
	applied, keys, logBytes, logEntries, diskFull                            gauge
	logTruncated, entries, commits, noopWrites, diskFullEvents, materialized counter
	checkpoints, snapshotsInstalled, duplicateWrites, batchIDsExpired        counter
	cacheHits, cacheMisses, cacheRefused, cacheEvictions                     counter
	writeErrors, integrityErrors                                             counterVec[string]
	clockClamped                                                             counter
	groupSize, commitSeconds, syncSeconds, logBlockBytes, lingerSeconds      *histogram

	historyBytes, historyVersions, historyHorizon   gauge
	historyRecorded, historyCollected, historyReads counter

	pxHits, pxMisses, pxNegative, pxEvictions, pxEvictedBytes, pxReadErrors counter
	pxAdmissions, pxTransient                                               counterVec[string]
	pxTransientValues, pxTransientBytes                                     gauge
	pxShard                                                                 counterVec[string]
	pxTiers                                                                 counterVec[TierResult]
	pxShardBytes                                                            gauge
	pxTierSeconds                                                           *histogramVec
	pxCachedValues, pxCachedBytes, pxBudget, pxWindowEntries                gauge
	pxSoftLimited, pxHardLimited                                            gauge
	pxCompactions                                                           counter
	pxSweepRecords, pxSweepTurns                                            counter
	pxFull                                                                  gauge
	pxCompactSeconds                                                        *histogram

	segments                                           gauge
	segmentsCreated, segmentsRemoved, segmentFailures  counter
	segmentsRecycled, sparesWritten, segmentsCompacted counter
	segmentBytes, replayed, engineSyncs                counter
	segmentSyncSeconds                                 *histogram

	droppedBySummary, droppedByBlock counter
	retired                          retiredMetrics
	writeStalls, writeStallSeconds   counter

	// scrape keeps Close from closing the engine while Metrics reads it.
	scrape sync.RWMutex
}

// retiredMetrics count the retired log blocks (retire.go).
type retiredMetrics struct {
	blocks, bytes            gauge
	retired, freed, recounts counter
	historyRefs              counter
}

// segmentFsyncBounds are the buckets of the log segments' fdatasync
// times: the bounds of the engine's WAL fsync histogram up to 5 ms (3 ms
// among them, where qs bench splits), then coarser.
var segmentFsyncBounds = []float64{0.0001, 0.0002, 0.0003, 0.0005, 0.0007, 0.001, 0.0015, 0.002, 0.003, 0.005,
	0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}

func newStoreMetrics() *storeMetrics {
	m := &storeMetrics{
		groupSize:          newHistogram(exponentialBounds(1, 2, 13)),
		commitSeconds:      newHistogram(latencyBounds),
		syncSeconds:        newHistogram(latencyBounds),
		lingerSeconds:      newHistogram(latencyBounds),
		logBlockBytes:      newHistogram(exponentialBounds(64, 4, 12)),
		pxTierSeconds:      &histogramVec{bounds: latencyBounds},
		pxCompactSeconds:   newHistogram(latencyBounds),
		segmentSyncSeconds: newHistogram(segmentFsyncBounds),
	}
	// The error series an alert or a dashboard watches exist at 0 before
	// the first error.
	for _, k := range []string{"value_crc", "log_value_crc", "chunk_crc", "log_block"} {
		m.integrityErrors.WithLabelValues(k)
	}
	for _, k := range []string{"disk_full", "write_failed", "corrupt"} {
		m.writeErrors.WithLabelValues(k)
	}
	return m
}

// Metrics is a snapshot of a store's counters and gauges, and of its
// storage engine's. Counters count from the store's open; gauges hold the
// last value set. The metrics collector of the process exports them.
type Metrics struct {
	// Name is the database's name.
	Name string

	// The database.
	AppliedIndex float64   // index of the last durable log entry
	AppliedTime  time.Time // its time (zero before the first)
	Keys         float64   // live keys
	LogBytes     float64   // stored bytes of the retained log
	LogEntries   float64   // entries in the retained log
	DiskFull     float64   // 1 while writes are refused for lack of disk space

	// Writes and commits.
	Entries             float64            // log entries committed
	Commits             float64            // durable commits that wrote entries
	NoopWrites          float64            // writes dropped because they would change nothing
	DuplicateWrites     float64            // batches whose ID was seen before
	BatchIDsExpired     float64            // batch ID outcomes removed after the idempotency window
	EntryTimeClamped    float64            // entries whose time was bounded by the log's clock
	DiskFullEvents      float64            // times the disk returned ENOSPC and the ballast was released
	Checkpoints         float64            // snapshots made for bootstrapping replicas
	SnapshotsInstalled  float64            // bootstrap snapshots installed
	WriteErrors         map[string]float64 // by kind
	IntegrityErrors     map[string]float64 // by kind
	CommitGroupRequests Histogram          // requests per durable commit
	CommitSeconds       Histogram
	SyncSeconds         Histogram
	CommitLingerSeconds Histogram

	// The log.
	LogTruncatedEntries float64            // removed by retention
	ValuesMaterialized  float64            // values copied out of dropped blocks
	LogBlocksDropped    map[string]float64 // by what retention read: summary, block
	LogBlockBytes       Histogram          // stored size of log blocks
	LogSegments         float64
	LogSegmentEvents    map[string]float64 // created, removed, failed, recycled, spare_written, compacted
	LogSegmentBytes     float64            // bytes appended to log segments
	LogSegmentFsync     Histogram          // seconds of each segment fdatasync
	LogReplayedEntries  float64            // applied again at open
	EngineSyncs         float64            // background syncs of the engine's WAL

	// Retired log blocks.
	RetiredBlocks        float64
	RetiredBlockBytes    float64
	BlocksRetired        float64
	RetiredBlocksFreed   float64
	RetiredRecounts      float64
	HistoryLogReferences float64

	// The read cache.
	ReadCacheHits, ReadCacheMisses float64
	ReadCacheRefused               float64
	ReadCacheEvictions             float64

	// The MVCC history.
	HistoryBytes, HistoryVersions, HistoryHorizonIndex float64
	HistoryRecorded, HistoryCollected, HistoryReads    float64

	// A proxy's cache.
	ProxyHits, ProxyMisses, ProxyNegative float64
	ProxyAdmissions                       map[string]float64 // by result
	ProxyTransient                        map[string]float64 // by result
	ProxyTransientValues                  float64
	ProxyTransientBytes                   float64
	ProxyShardCache                       map[string]float64 // by result
	ProxyShardCacheBytes                  float64
	ProxyTierLookups                      map[TierResult]float64
	ProxyTierFetchSeconds                 map[string]Histogram // by tier
	ProxyEvictions, ProxyEvictedBytes     float64
	ProxyCachedValues, ProxyCachedBytes   float64
	ProxyCacheBudgetBytes                 float64
	ProxyWindowEntries                    float64
	ProxySoftLimited, ProxyHardLimited    float64
	ProxyCompactions                      float64
	ProxySweepRecords, ProxySweepTurns    float64
	ProxyFull                             float64
	ProxyCompactionSeconds                Histogram
	ProxyReadErrors                       float64

	// The storage engine.
	WriteStalls, WriteStallSeconds float64
	// Engine is the engine's own snapshot; nil once the store is closed.
	Engine *pebble.Metrics
	// Disk is the space of the filesystem the database lives on; DiskOK
	// is false if it could not be read.
	Disk   DiskSpace
	DiskOK bool
}

// TierResult names a cache tier (l1, l2, l3) and a lookup result (hit,
// miss).
type TierResult struct{ Tier, Result string }

// DiskSpace is the space of a filesystem, and the reserve below which
// writes are refused (Options.MinFreeBytes).
type DiskSpace struct{ AvailBytes, TotalBytes, ReserveBytes uint64 }

// Metrics returns a snapshot of the store's metrics. It is safe to call at
// any time, also after Close (Engine and Disk are then left out).
func (s *Store) Metrics() Metrics {
	m := s.m
	out := Metrics{
		Name:         s.opts.Name,
		AppliedIndex: m.applied.value(),
		AppliedTime:  s.AppliedTime(),
		Keys:         m.keys.value(), LogBytes: m.logBytes.value(), LogEntries: m.logEntries.value(),
		DiskFull: m.diskFull.value(),

		Entries: m.entries.value(), Commits: m.commits.value(), NoopWrites: m.noopWrites.value(),
		DuplicateWrites: m.duplicateWrites.value(), BatchIDsExpired: m.batchIDsExpired.value(),
		EntryTimeClamped: m.clockClamped.value(), DiskFullEvents: m.diskFullEvents.value(),
		Checkpoints: m.checkpoints.value(), SnapshotsInstalled: m.snapshotsInstalled.value(),
		WriteErrors: m.writeErrors.snapshot(), IntegrityErrors: m.integrityErrors.snapshot(),
		CommitGroupRequests: m.groupSize.snapshot(), CommitSeconds: m.commitSeconds.snapshot(),
		SyncSeconds: m.syncSeconds.snapshot(), CommitLingerSeconds: m.lingerSeconds.snapshot(),

		LogTruncatedEntries: m.logTruncated.value(), ValuesMaterialized: m.materialized.value(),
		LogBlocksDropped: map[string]float64{"summary": m.droppedBySummary.value(), "block": m.droppedByBlock.value()},
		LogBlockBytes:    m.logBlockBytes.snapshot(),
		LogSegments:      m.segments.value(),
		LogSegmentEvents: map[string]float64{
			"created": m.segmentsCreated.value(), "removed": m.segmentsRemoved.value(), "failed": m.segmentFailures.value(),
			"recycled": m.segmentsRecycled.value(), "spare_written": m.sparesWritten.value(), "compacted": m.segmentsCompacted.value()},
		LogSegmentBytes: m.segmentBytes.value(), LogSegmentFsync: m.segmentSyncSeconds.snapshot(),
		LogReplayedEntries: m.replayed.value(), EngineSyncs: m.engineSyncs.value(),

		RetiredBlocks: m.retired.blocks.value(), RetiredBlockBytes: m.retired.bytes.value(),
		BlocksRetired: m.retired.retired.value(), RetiredBlocksFreed: m.retired.freed.value(),
		RetiredRecounts: m.retired.recounts.value(), HistoryLogReferences: m.retired.historyRefs.value(),

		ReadCacheHits: m.cacheHits.value(), ReadCacheMisses: m.cacheMisses.value(),
		ReadCacheRefused: m.cacheRefused.value(), ReadCacheEvictions: m.cacheEvictions.value(),

		HistoryBytes: m.historyBytes.value(), HistoryVersions: m.historyVersions.value(),
		HistoryHorizonIndex: m.historyHorizon.value(), HistoryRecorded: m.historyRecorded.value(),
		HistoryCollected: m.historyCollected.value(), HistoryReads: m.historyReads.value(),

		ProxyHits: m.pxHits.value(), ProxyMisses: m.pxMisses.value(), ProxyNegative: m.pxNegative.value(),
		ProxyAdmissions: m.pxAdmissions.snapshot(), ProxyTransient: m.pxTransient.snapshot(),
		ProxyTransientValues: m.pxTransientValues.value(), ProxyTransientBytes: m.pxTransientBytes.value(),
		ProxyShardCache: m.pxShard.snapshot(), ProxyShardCacheBytes: m.pxShardBytes.value(),
		ProxyTierLookups:      m.pxTiers.snapshot(),
		ProxyTierFetchSeconds: m.pxTierSeconds.snapshot(),
		ProxyEvictions:        m.pxEvictions.value(), ProxyEvictedBytes: m.pxEvictedBytes.value(),
		ProxyCachedValues: m.pxCachedValues.value(), ProxyCachedBytes: m.pxCachedBytes.value(),
		ProxyCacheBudgetBytes: m.pxBudget.value(), ProxyWindowEntries: m.pxWindowEntries.value(),
		ProxySoftLimited: m.pxSoftLimited.value(), ProxyHardLimited: m.pxHardLimited.value(),
		ProxyCompactions: m.pxCompactions.value(), ProxyCompactionSeconds: m.pxCompactSeconds.snapshot(),
		ProxySweepRecords: m.pxSweepRecords.value(), ProxySweepTurns: m.pxSweepTurns.value(), ProxyFull: m.pxFull.value(),
		ProxyReadErrors: m.pxReadErrors.value(),

		WriteStalls: m.writeStalls.value(), WriteStallSeconds: m.writeStallSeconds.value(),
	}
	m.scrape.RLock()
	defer m.scrape.RUnlock()
	if s.closed.Load() {
		return out
	}
	s.engine.RLock()
	out.Engine = s.db.Metrics()
	s.engine.RUnlock()
	if du, err := s.opts.FS.GetDiskUsage(s.opts.Dir); err == nil {
		out.Disk = DiskSpace{AvailBytes: du.AvailBytes, TotalBytes: du.TotalBytes, ReserveBytes: s.opts.MinFreeBytes}
		out.DiskOK = true
	}
	return out
}

// closing waits for a Metrics call reading the engine to finish; Close
// calls it once closed is set, before it closes the engine.
func (m *storeMetrics) closing() {
	m.scrape.Lock()
	defer m.scrape.Unlock()
}
