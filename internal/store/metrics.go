package store

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "store"

var (
	mApplied = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "applied_index",
		Help: "Index of the last durable log entry."}, []string{"db"}))
	mKeys = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "keys",
		Help: "Live keys in the database."}, []string{"db"}))
	mLogBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_bytes",
		Help: "Stored bytes of the retained log."}, []string{"db"}))
	mLogEntries = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_entries",
		Help: "Entries in the retained log."}, []string{"db"}))
	mLogTruncated = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_truncated_entries_total",
		Help: "Log entries removed by retention."}, []string{"db"}))
	mEntries = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_total",
		Help: "Log entries committed."}, []string{"db"}))
	mCommits = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "commits_total",
		Help: "Durable commits (fsyncs) that wrote entries."}, []string{"db"}))
	mMaterialized = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "values_materialized_total",
		Help: "Values copied out of log blocks dropped by retention into their own records."}, []string{"db"}))
	mNoopWrites = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "noop_writes_total",
		Help: "Writes dropped because they would not change anything."}, []string{"db"}))
	mWriteErrors = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "write_errors_total",
		Help: "Writes refused or failed, by kind."}, []string{"db", "kind"}))
	mIntegrityErrors = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "integrity_errors_total",
		Help: "Integrity check failures (value CRC, chunk CRC, log block), never served."}, []string{"db", "kind"}))
	mClockClamped = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entry_time_clamped_total",
		Help: "Entries whose proposed time (or a root's wall clock) was further ahead than the log's clock may move; their time was bounded."}, []string{"db"}))
	mDiskFull = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "disk_full",
		Help: "1 while writes are refused for lack of disk space."}, []string{"db"}))
	mDiskFullEvents = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "disk_full_events_total",
		Help: "Times the disk returned ENOSPC and the ballast was released."}, []string{"db"}))
	mCheckpoints = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "checkpoints_total",
		Help: "Snapshots (checkpoints) made of the database, for bootstrapping replicas."}, []string{"db"}))
	mSnapshotsInstalled = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshots_installed_total",
		Help: "Bootstrap snapshots installed in place of the live database."}, []string{"db"}))
	mDuplicateWrites = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "duplicate_writes_total",
		Help: "Batches whose ID was seen before: answered with the first outcome, not applied again."}, []string{"db"}))
	mBatchIDsExpired = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "batch_ids_expired_total",
		Help: "Batch ID outcomes removed after the idempotency window."}, []string{"db"}))
	mCacheLookups = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "read_cache_lookups_total",
		Help: "Keys looked up in the read cache, by result (hit, miss)."}, []string{"db", "result"}))
	mCacheRefused = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "read_cache_refused_total",
		Help: "Values read from disk not cached because a write to their shard raced the read."}, []string{"db"}))
	mCacheEvictions = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "read_cache_evictions_total",
		Help: "Entries evicted from the read cache for its budget."}, []string{"db"}))
	mGroupSize = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "commit_group_requests",
		Help: "Requests committed together in one durable commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 13)}, []string{"db"}))
	mCommitSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "commit_seconds",
		Help: "Time to evaluate and durably commit one group.", Buckets: metrics.LatencyBuckets}, []string{"db"}))
	mSyncSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "sync_seconds",
		Help: "Time of the fsynced batch commit alone.", Buckets: metrics.LatencyBuckets}, []string{"db"}))
	mLingerSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "commit_linger_seconds",
		Help: "Time the committer waited for more writes before a durable commit.", Buckets: metrics.LatencyBuckets}, []string{"db"}))
	mHistoryBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "history_bytes",
		Help: "Stored bytes of the MVCC history (versions kept for reads as of an earlier index)."}, []string{"db"}))
	mHistoryVersions = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "history_versions",
		Help: "Versions held in the MVCC history."}, []string{"db"}))
	mHistoryHorizon = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "history_horizon_index",
		Help: "Lowest index a read as of an earlier index can be answered at."}, []string{"db"}))
	mHistoryRecorded = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "history_recorded_total",
		Help: "Versions added to the MVCC history (overwrites and deletes)."}, []string{"db"}))
	mHistoryCollected = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "history_collected_total",
		Help: "Versions removed from the MVCC history by retention."}, []string{"db"}))
	mHistoryReads = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "history_reads_total",
		Help: "Reads as of an earlier index that needed the MVCC history (the current version was newer)."}, []string{"db"}))
	mPxLookups = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_lookups_total",
		Help: "Keys read on a proxy, by result: hit (value held here), miss (fetched from a replica), negative (no such key, answered here)."}, []string{"db", "result"}))
	mPxAdmissions = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_admissions_total",
		Help: "Fetched values offered to a proxy's cache, by result: admitted, stale (the key changed meanwhile), refused_hard_limit (free disk below the hard limit), dropped (queue full)."}, []string{"db", "result"}))
	mPxTransient = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_transient_total",
		Help: "Fetched values through a proxy's transient tier, by result: held (in memory, not stored), stored (its key was read twice recently: queued for the cache at once), too_large (larger than the tier), read_again (held and read again: queued for the cache), evicted (left the tier unread: no disk write), prefetched (published by a relay for another proxy's miss, held)."}, []string{"db", "result"}))
	mPxShard = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_shard_cache_total",
		Help: "Values through the budget of a proxy's own L2 shard, by result: put (held, from a fetch or the prefetch stream), evicted (left for room), served (an L2 request of another node answered), missed (an L2 request not answered: version not held), mismatch (a held value that does not match the key's record: dropped, never served)."}, []string{"db", "result"}))
	mPxShardBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_shard_cache_bytes",
		Help: "Bytes the budget of a proxy's own L2 shard holds in memory (keys, values and overhead)."}, []string{"db"}))
	mPxTierLookups = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_tier_lookups_total",
		Help: "Values a proxy read looked up in each cache tier (l1: this node's cache, window, transient tier and shard budget; l2: the owner of the key's shard in the data centre; l3: the replicas, through the relays), by result: hit or miss (an l3 miss is a failed fetch)."}, []string{"db", "tier", "result"}))
	mPxTierSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_tier_fetch_seconds",
		Help: "Time of one fetch from a cache tier beyond this node (l2: the owners of the keys' shards; l3: the replicas, through the relays).", Buckets: metrics.LatencyBuckets}, []string{"db", "tier"}))
	mPxTransientValues = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_transient_values",
		Help: "Values a proxy's transient tier holds in memory."}, []string{"db"}))
	mPxTransientBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_transient_bytes",
		Help: "Bytes a proxy's transient tier holds in memory (keys, values and overhead)."}, []string{"db"}))
	mPxEvictions = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_evictions_total",
		Help: "Values evicted from a proxy's cache (their record kept, the value fetched again when read)."}, []string{"db"}))
	mPxEvictedBytes = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_evicted_bytes_total",
		Help: "Bytes of the values evicted from a proxy's cache."}, []string{"db"}))
	mPxCachedValues = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_cached_values",
		Help: "Values a proxy stores (its sliding window included)."}, []string{"db"}))
	mPxCachedBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_cached_bytes",
		Help: "Bytes of the values a proxy stores (its sliding window included)."}, []string{"db"}))
	mPxBudget = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_cache_budget_bytes",
		Help: "The configured budget of a proxy's stored values."}, []string{"db"}))
	mPxWindow = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_window_entries",
		Help: "Entries in a proxy's sliding window (whose values are never evicted)."}, []string{"db"}))
	mPxDiskLimit = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_disk_limited",
		Help: "1 while free disk is below the limit: soft (evicting beyond the budget), hard (admitting nothing)."}, []string{"db", "limit"}))
	mPxCompactions = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_compactions_total",
		Help: "Compactions a proxy runs after 64 MiB of values were evicted from a key range, or 64 MiB of log dropped (to give their space back)."}, []string{"db"}))
	mPxCompactSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_compaction_seconds",
		Help: "Time of one compaction after evictions.", Buckets: metrics.LatencyBuckets}, []string{"db"}))
	mPxFetchErrors = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proxy_read_errors_total",
		Help: "Proxy reads that failed because a value could not be fetched from any replica in time."}, []string{"db"}))
	mLogBlockBytes = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_block_bytes",
		Help: "Stored (compressed) size of log blocks.", Buckets: prometheus.ExponentialBuckets(64, 4, 12)}, []string{"db"}))
	mSegments = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_segments",
		Help: "Log segment files (the home of the log blocks of durable commits)."}, []string{"db"}))
	mSegmentEvents = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_segment_events_total",
		Help: "Log segments created (recycled: made of a removed segment or of a spare of zeros, whose fsyncs then write no metadata), removed (no block key points into them any more), failed (an append or fsync failed: the segment was sealed); spare_written: a spare of zeros written in the background; compacted: the live values of a sparse segment's retired blocks copied out so that it can be removed."}, []string{"db", "event"}))
	mSegmentBytes = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_segment_written_bytes_total",
		Help: "Bytes appended to log segments (frames: block plus 8 bytes)."}, []string{"db"}))
	mSegmentSyncSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_segment_fsync_seconds",
		Help: "Time of the fdatasync of a log segment: the durability point of a commit.",
		// qs_store_wal_fsync_seconds's bounds up to 5 ms (3 ms among them,
		// where qs bench splits), then coarser.
		Buckets: append(append([]float64(nil), fsyncBounds...), 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)}, []string{"db"}))
	mReplayed = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_replayed_entries_total",
		Help: "Entries of durable log blocks applied again at open because the storage engine had lost its unsynced tail."}, []string{"db"}))
	mEngineSyncs = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "engine_background_syncs_total",
		Help: "Background syncs of the storage engine's write-ahead log (they bound what a replay at open re-applies and let log segments be removed)."}, []string{"db"}))
)

// storeMetrics are the collectors of one database, curried with its name.
type storeMetrics struct {
	applied, keys, logBytes, logEntries, diskFull                            prometheus.Gauge
	logTruncated, entries, commits, noopWrites, diskFullEvents, materialized prometheus.Counter
	checkpoints, snapshotsInstalled, duplicateWrites, batchIDsExpired        prometheus.Counter
	cacheHits, cacheMisses, cacheRefused, cacheEvictions                     prometheus.Counter
	writeErrors, integrityErrors                                             *prometheus.CounterVec
	clockClamped                                                             prometheus.Counter
	groupSize, commitSeconds, syncSeconds, logBlockBytes, lingerSeconds      prometheus.Observer

	historyBytes, historyVersions, historyHorizon   prometheus.Gauge
	historyRecorded, historyCollected, historyReads prometheus.Counter

	pxHits, pxMisses, pxNegative, pxEvictions, pxEvictedBytes, pxReadErrors prometheus.Counter
	pxAdmissions, pxTransient                                               *prometheus.CounterVec
	pxTransientValues, pxTransientBytes                                     prometheus.Gauge
	pxShard, pxTiers                                                        *prometheus.CounterVec
	pxShardBytes                                                            prometheus.Gauge
	pxTierSeconds                                                           prometheus.ObserverVec
	pxCachedValues, pxCachedBytes, pxBudget, pxWindowEntries                prometheus.Gauge
	pxSoftLimited, pxHardLimited                                            prometheus.Gauge
	pxCompactions                                                           prometheus.Counter
	pxCompactSeconds                                                        prometheus.Observer

	segments                                           prometheus.Gauge
	segmentsCreated, segmentsRemoved, segmentFailures  prometheus.Counter
	segmentsRecycled, sparesWritten, segmentsCompacted prometheus.Counter
	segmentBytes, replayed, engineSyncs                prometheus.Counter
	segmentSyncSeconds                                 prometheus.Observer
}

func newStoreMetrics(db string) *storeMetrics {
	l := prometheus.Labels{"db": db}
	return &storeMetrics{
		applied: mApplied.With(l), keys: mKeys.With(l), logBytes: mLogBytes.With(l),
		logEntries: mLogEntries.With(l), diskFull: mDiskFull.With(l),
		logTruncated: mLogTruncated.With(l), entries: mEntries.With(l), commits: mCommits.With(l),
		noopWrites: mNoopWrites.With(l), materialized: mMaterialized.With(l), diskFullEvents: mDiskFullEvents.With(l),
		writeErrors: mWriteErrors.MustCurryWith(l), integrityErrors: mIntegrityErrors.MustCurryWith(l),
		clockClamped: mClockClamped.With(l),
		groupSize:    mGroupSize.With(l), commitSeconds: mCommitSeconds.With(l),
		syncSeconds: mSyncSeconds.With(l), logBlockBytes: mLogBlockBytes.With(l),
		lingerSeconds: mLingerSeconds.With(l),
		checkpoints:   mCheckpoints.With(l), snapshotsInstalled: mSnapshotsInstalled.With(l),
		duplicateWrites: mDuplicateWrites.With(l), batchIDsExpired: mBatchIDsExpired.With(l),
		cacheHits: mCacheLookups.WithLabelValues(db, "hit"), cacheMisses: mCacheLookups.WithLabelValues(db, "miss"),
		cacheRefused: mCacheRefused.With(l), cacheEvictions: mCacheEvictions.With(l),

		historyBytes: mHistoryBytes.With(l), historyVersions: mHistoryVersions.With(l),
		historyHorizon: mHistoryHorizon.With(l), historyRecorded: mHistoryRecorded.With(l),
		historyCollected: mHistoryCollected.With(l), historyReads: mHistoryReads.With(l),

		pxHits: mPxLookups.WithLabelValues(db, "hit"), pxMisses: mPxLookups.WithLabelValues(db, "miss"),
		pxNegative: mPxLookups.WithLabelValues(db, "negative"), pxEvictions: mPxEvictions.With(l),
		pxEvictedBytes: mPxEvictedBytes.With(l), pxReadErrors: mPxFetchErrors.With(l),
		pxAdmissions: mPxAdmissions.MustCurryWith(l), pxCachedValues: mPxCachedValues.With(l),
		pxCachedBytes: mPxCachedBytes.With(l), pxBudget: mPxBudget.With(l), pxWindowEntries: mPxWindow.With(l),
		pxSoftLimited: mPxDiskLimit.WithLabelValues(db, "soft"), pxHardLimited: mPxDiskLimit.WithLabelValues(db, "hard"),
		pxCompactions: mPxCompactions.With(l), pxCompactSeconds: mPxCompactSeconds.With(l),
		pxTransient: mPxTransient.MustCurryWith(l), pxTransientValues: mPxTransientValues.With(l), pxTransientBytes: mPxTransientBytes.With(l),
		pxShard: mPxShard.MustCurryWith(l), pxShardBytes: mPxShardBytes.With(l),
		pxTiers: mPxTierLookups.MustCurryWith(l), pxTierSeconds: mPxTierSeconds.MustCurryWith(l),

		segments:          mSegments.With(l),
		segmentsCreated:   mSegmentEvents.WithLabelValues(db, "created"),
		segmentsRemoved:   mSegmentEvents.WithLabelValues(db, "removed"),
		segmentFailures:   mSegmentEvents.WithLabelValues(db, "failed"),
		segmentsRecycled:  mSegmentEvents.WithLabelValues(db, "recycled"),
		sparesWritten:     mSegmentEvents.WithLabelValues(db, "spare_written"),
		segmentsCompacted: mSegmentEvents.WithLabelValues(db, "compacted"),
		segmentBytes:      mSegmentBytes.With(l), replayed: mReplayed.With(l), engineSyncs: mEngineSyncs.With(l),
		segmentSyncSeconds: mSegmentSyncSeconds.With(l),
	}
}
