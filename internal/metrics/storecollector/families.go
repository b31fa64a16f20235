package storecollector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/store"
)

// value is a family of one series per database, read from a snapshot S
// (a store's metrics, its engine's, the space of its disk).
type value[S any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(*S) float64
}

func gaugeOf[S any](name, help string, get func(*S) float64) value[S] {
	return value[S]{storeDesc(name, help), prometheus.GaugeValue, get}
}

func counterOf[S any](name, help string, get func(*S) float64) value[S] {
	return value[S]{storeDesc(name, help), prometheus.CounterValue, get}
}

// labelledValue is a family with a second label (besides db), one series
// per key of the map get returns.
type labelledValue[S any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(*S) map[string]float64
}

func labelledOf[S any](name, help, label string, get func(*S) map[string]float64, typ prometheus.ValueType) labelledValue[S] {
	return labelledValue[S]{storeDesc(name, help, label), typ, get}
}

// collectValues reports the families vs and ls of database db, read from
// s.
func collectValues[S any](ch chan<- prometheus.Metric, db string, s *S, vs []value[S], ls []labelledValue[S]) {
	for _, v := range vs {
		ch <- prometheus.MustNewConstMetric(v.desc, v.typ, v.get(s), db)
	}
	for _, v := range ls {
		for k, x := range v.get(s) {
			ch <- prometheus.MustNewConstMetric(v.desc, v.typ, x, db, k)
		}
	}
}

type histogramValue struct {
	desc *prometheus.Desc
	get  func(*store.Metrics) store.Histogram
}

func histogramOf(name, help string, get func(*store.Metrics) store.Histogram) histogramValue {
	return histogramValue{storeDesc(name, help), get}
}

// values are the families of one series per database.
var values = []value[store.Metrics]{
	gaugeOf("applied_index", "Index of the last durable log entry.", func(m *store.Metrics) float64 { return m.AppliedIndex }),
	gaugeOf("keys", "Live keys in the database.", func(m *store.Metrics) float64 { return m.Keys }),
	gaugeOf("log_bytes", "Stored bytes of the retained log.", func(m *store.Metrics) float64 { return m.LogBytes }),
	gaugeOf("log_entries", "Entries in the retained log.", func(m *store.Metrics) float64 { return m.LogEntries }),
	counterOf("log_truncated_entries_total", "Log entries removed by retention.", func(m *store.Metrics) float64 { return m.LogTruncatedEntries }),
	counterOf("entries_total", "Log entries committed.", func(m *store.Metrics) float64 { return m.Entries }),
	counterOf("commits_total", "Durable commits (fsyncs) that wrote entries.", func(m *store.Metrics) float64 { return m.Commits }),
	counterOf("values_materialized_total", "Values copied out of log blocks dropped by retention into their own records.", func(m *store.Metrics) float64 { return m.ValuesMaterialized }),
	counterOf("noop_writes_total", "Writes dropped because they would not change anything.", func(m *store.Metrics) float64 { return m.NoopWrites }),
	counterOf("entry_time_clamped_total", "Entries whose proposed time (or a root's wall clock) was further ahead than the log's clock may move; their time was bounded.", func(m *store.Metrics) float64 { return m.EntryTimeClamped }),
	gaugeOf("disk_full", "1 while writes are refused for lack of disk space.", func(m *store.Metrics) float64 { return m.DiskFull }),
	counterOf("disk_full_events_total", "Times the disk returned ENOSPC and the ballast was released.", func(m *store.Metrics) float64 { return m.DiskFullEvents }),
	counterOf("checkpoints_total", "Snapshots (checkpoints) made of the database, for bootstrapping replicas.", func(m *store.Metrics) float64 { return m.Checkpoints }),
	counterOf("snapshots_installed_total", "Bootstrap snapshots installed in place of the live database.", func(m *store.Metrics) float64 { return m.SnapshotsInstalled }),
	counterOf("duplicate_writes_total", "Batches whose ID was seen before: answered with the first outcome, not applied again.", func(m *store.Metrics) float64 { return m.DuplicateWrites }),
	counterOf("batch_ids_expired_total", "Batch ID outcomes removed after the idempotency window.", func(m *store.Metrics) float64 { return m.BatchIDsExpired }),
	counterOf("read_cache_refused_total", "Values read from disk not cached because a write to their shard raced the read.", func(m *store.Metrics) float64 { return m.ReadCacheRefused }),
	counterOf("read_cache_evictions_total", "Entries evicted from the read cache for its budget.", func(m *store.Metrics) float64 { return m.ReadCacheEvictions }),
	gaugeOf("history_bytes", "Stored bytes of the MVCC history (versions kept for reads as of an earlier index).", func(m *store.Metrics) float64 { return m.HistoryBytes }),
	gaugeOf("history_versions", "Versions held in the MVCC history.", func(m *store.Metrics) float64 { return m.HistoryVersions }),
	gaugeOf("history_horizon_index", "Lowest index a read as of an earlier index can be answered at.", func(m *store.Metrics) float64 { return m.HistoryHorizonIndex }),
	counterOf("history_recorded_total", "Versions added to the MVCC history (overwrites and deletes).", func(m *store.Metrics) float64 { return m.HistoryRecorded }),
	counterOf("history_collected_total", "Versions removed from the MVCC history by retention.", func(m *store.Metrics) float64 { return m.HistoryCollected }),
	counterOf("history_reads_total", "Reads as of an earlier index that needed the MVCC history (the current version was newer).", func(m *store.Metrics) float64 { return m.HistoryReads }),
	gaugeOf("proxy_shard_cache_bytes", "Bytes the budget of a proxy's own L2 shard holds in memory (keys, values and overhead).", func(m *store.Metrics) float64 { return m.ProxyShardCacheBytes }),
	gaugeOf("proxy_transient_values", "Values a proxy's transient tier holds in memory.", func(m *store.Metrics) float64 { return m.ProxyTransientValues }),
	gaugeOf("proxy_transient_bytes", "Bytes a proxy's transient tier holds in memory (keys, values and overhead).", func(m *store.Metrics) float64 { return m.ProxyTransientBytes }),
	counterOf("proxy_evictions_total", "Values evicted from a proxy's cache (their record kept, the value fetched again when read).", func(m *store.Metrics) float64 { return m.ProxyEvictions }),
	counterOf("proxy_evicted_bytes_total", "Bytes of the values evicted from a proxy's cache.", func(m *store.Metrics) float64 { return m.ProxyEvictedBytes }),
	gaugeOf("proxy_cached_values", "Values a proxy stores (its sliding window included).", func(m *store.Metrics) float64 { return m.ProxyCachedValues }),
	gaugeOf("proxy_cached_bytes", "Bytes of the values a proxy stores (its sliding window included).", func(m *store.Metrics) float64 { return m.ProxyCachedBytes }),
	gaugeOf("proxy_cache_budget_bytes", "The configured budget of a proxy's stored values.", func(m *store.Metrics) float64 { return m.ProxyCacheBudgetBytes }),
	gaugeOf("proxy_window_entries", "Entries in a proxy's sliding window (whose values are never evicted).", func(m *store.Metrics) float64 { return m.ProxyWindowEntries }),
	counterOf("proxy_compactions_total", "Compactions a proxy runs after 64 MiB of values were evicted from a key range, or 64 MiB of log dropped (to give their space back).", func(m *store.Metrics) float64 { return m.ProxyCompactions }),
	counterOf("proxy_sweep_records_total", "Value records the cache keeper's CLOCK hand looked at to find values to evict.", func(m *store.Metrics) float64 { return m.ProxySweepRecords }),
	counterOf("proxy_sweep_turns_total", "Whole turns of the cache keeper's CLOCK hand over a proxy's value records.", func(m *store.Metrics) float64 { return m.ProxySweepTurns }),
	gaugeOf("proxy_cache_full", "1 while a proxy's cache holds more than its budget and a whole turn of the hand found nothing more to evict (the window's values): fetched values are not admitted.", func(m *store.Metrics) float64 { return m.ProxyFull }),
	counterOf("proxy_read_errors_total", "Proxy reads that failed because a value could not be fetched from any replica in time.", func(m *store.Metrics) float64 { return m.ProxyReadErrors }),
	gaugeOf("log_segments", "Log segment files (the home of the log blocks of durable commits).", func(m *store.Metrics) float64 { return m.LogSegments }),
	counterOf("log_segment_written_bytes_total", "Bytes appended to log segments (frames: block plus 8 bytes).", func(m *store.Metrics) float64 { return m.LogSegmentBytes }),
	counterOf("log_replayed_entries_total", "Entries of durable log blocks applied again at open because the storage engine had lost its unsynced tail.", func(m *store.Metrics) float64 { return m.LogReplayedEntries }),
	counterOf("engine_background_syncs_total", "Background syncs of the storage engine's write-ahead log (they bound what a replay at open re-applies and let log segments be removed).", func(m *store.Metrics) float64 { return m.EngineSyncs }),
	gaugeOf("retired_log_blocks", "Log blocks dropped from the log but kept for the live values they hold.", func(m *store.Metrics) float64 { return m.RetiredBlocks }),
	gaugeOf("retired_log_block_bytes", "Stored bytes of the retired log blocks (live values and garbage).", func(m *store.Metrics) float64 { return m.RetiredBlockBytes }),
	counterOf("log_blocks_retired_total", "Log blocks retired by retention instead of having their live values copied out.", func(m *store.Metrics) float64 { return m.BlocksRetired }),
	counterOf("retired_log_blocks_freed_total", "Retired log blocks deleted once less than half of them was live (the rest copied out).", func(m *store.Metrics) float64 { return m.RetiredBlocksFreed }),
	counterOf("history_log_references_total", "Overwritten or deleted values kept in the history as references to their log block instead of copies.", func(m *store.Metrics) float64 { return m.HistoryLogReferences }),
	counterOf("retired_log_block_recounts_total", "Retired block live counts found wrong when checked against the records (and corrected); above 0 is a bug.", func(m *store.Metrics) float64 { return m.RetiredRecounts }),
	counterOf("engine_write_stalls_total", "Times the storage engine held writes back (too many memtables or L0 tables waiting for a flush or compaction).", func(m *store.Metrics) float64 { return m.WriteStalls }),
	counterOf("engine_write_stall_seconds_total", "Time writes were held back by the storage engine.", func(m *store.Metrics) float64 { return m.WriteStallSeconds }),
}

// labelled are the families of one series per database and value of a
// second label.
var labelled = []labelledValue[store.Metrics]{
	labelledOf("proxy_disk_limited", "1 while free disk is below the limit: soft (evicting beyond the budget), hard (admitting nothing).", "limit", func(m *store.Metrics) map[string]float64 {
		return map[string]float64{"soft": m.ProxySoftLimited, "hard": m.ProxyHardLimited}
	}, prometheus.GaugeValue),
	labelledOf("write_errors_total", "Writes refused or failed, by kind.", "kind", func(m *store.Metrics) map[string]float64 { return m.WriteErrors }, prometheus.CounterValue),
	labelledOf("integrity_errors_total", "Integrity check failures (value CRC, chunk CRC, log block), never served.", "kind", func(m *store.Metrics) map[string]float64 { return m.IntegrityErrors }, prometheus.CounterValue),
	labelledOf("proxy_admissions_total", "Fetched values offered to a proxy's cache, by result: admitted, stale (the key changed meanwhile), refused_hard_limit (free disk below the hard limit), refused_full (the cache is full of its window's values), dropped (queue full).", "result", func(m *store.Metrics) map[string]float64 { return m.ProxyAdmissions }, prometheus.CounterValue),
	labelledOf("proxy_transient_total", "Fetched values through a proxy's transient tier, by result: held (in memory, not stored), stored (its key was read twice recently: queued for the cache at once), too_large (larger than the tier), read_again (held and read again: queued for the cache), evicted (left the tier unread: no disk write), prefetched (published by a relay for another proxy's miss, held).", "result", func(m *store.Metrics) map[string]float64 { return m.ProxyTransient }, prometheus.CounterValue),
	labelledOf("proxy_shard_cache_total", "Values through the budget of a proxy's own L2 shard, by result: put (held, from a fetch or the prefetch stream), evicted (left for room), served (an L2 request of another node answered), missed (an L2 request not answered: version not held), mismatch (a held value that does not match the key's record: dropped, never served).", "result", func(m *store.Metrics) map[string]float64 { return m.ProxyShardCache }, prometheus.CounterValue),
	labelledOf("log_segment_events_total", "Log segments created (recycled: made of a removed segment or of a spare of zeros, whose fsyncs then write no metadata), removed (no block key points into them any more), failed (an append or fsync failed: the segment was sealed); spare_written: a spare of zeros written in the background; compacted: the live values of a sparse segment's retired blocks copied out so that it can be removed.", "event", func(m *store.Metrics) map[string]float64 { return m.LogSegmentEvents }, prometheus.CounterValue),
	labelledOf("read_cache_lookups_total", "Keys looked up in the read cache, by result (hit, miss).", "result", func(m *store.Metrics) map[string]float64 {
		return map[string]float64{"hit": m.ReadCacheHits, "miss": m.ReadCacheMisses}
	}, prometheus.CounterValue),
	labelledOf("proxy_lookups_total", "Keys read on a proxy, by result: hit (value held here), miss (fetched from a replica), negative (no such key, answered here).", "result", func(m *store.Metrics) map[string]float64 {
		return map[string]float64{"hit": m.ProxyHits, "miss": m.ProxyMisses, "negative": m.ProxyNegative}
	}, prometheus.CounterValue),
	labelledOf("log_blocks_dropped_total", "Log blocks retention dropped from the log (deleted or retired), by what it read to do so: summary, or block (written before summaries existed, or a damaged summary).", "by", func(m *store.Metrics) map[string]float64 { return m.LogBlocksDropped }, prometheus.CounterValue),
}

// histograms are the histograms of one series per database.
var histograms = []histogramValue{
	histogramOf("commit_group_requests", "Requests committed together in one durable commit.", func(m *store.Metrics) store.Histogram { return m.CommitGroupRequests }),
	histogramOf("commit_seconds", "Time to evaluate and durably commit one group.", func(m *store.Metrics) store.Histogram { return m.CommitSeconds }),
	histogramOf("sync_seconds", "Time of the fsynced batch commit alone.", func(m *store.Metrics) store.Histogram { return m.SyncSeconds }),
	histogramOf("commit_linger_seconds", "Time the committer waited for more writes before a durable commit.", func(m *store.Metrics) store.Histogram { return m.CommitLingerSeconds }),
	histogramOf("proxy_compaction_seconds", "Time of one compaction after evictions.", func(m *store.Metrics) store.Histogram { return m.ProxyCompactionSeconds }),
	histogramOf("log_block_bytes", "Stored (compressed) size of log blocks.", func(m *store.Metrics) store.Histogram { return m.LogBlockBytes }),
	histogramOf("log_segment_fsync_seconds", "Time of the fdatasync of a log segment: the durability point of a commit.", func(m *store.Metrics) store.Histogram { return m.LogSegmentFsync }),
}

var (
	dTierLookups = storeDesc("proxy_tier_lookups_total",
		"Values a proxy read looked up in each cache tier (l1: this node's cache, window, transient tier and shard budget; l2: the owner of the key's shard in the data centre; l3: the replicas, through the relays), by result: hit or miss (an l3 miss is a failed fetch).",
		"tier", "result")
	dTierSeconds = storeDesc("proxy_tier_fetch_seconds",
		"Time of one fetch from a cache tier beyond this node (l2: the owners of the keys' shards; l3: the replicas, through the relays).",
		"tier")
	// The log's clock (the time of the last applied entry) against this
	// node's: positive when the log is dated ahead of local time (a root
	// or member whose clock runs ahead; replica lag then reads below 0),
	// negative by the age of the last entry otherwise.
	dLogClockAhead = storeDesc("log_clock_ahead_seconds",
		"Time of the last applied log entry minus this node's clock: above 0, the log is dated in this node's future; below, by how much it is behind.")
)

// descs are the descriptions of every family the collector reports:
// storeDesc, which describes each, adds it.
var descs []*prometheus.Desc

// storeDesc describes the family qs_store_<name>, labelled by db and
// labels, and adds it to descs.
func storeDesc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, name), help, append([]string{"db"}, labels...), nil)
	descs = append(descs, d)
	return d
}

// collectStore reports the store's own metrics in m; now dates the log
// clock.
func collectStore(ch chan<- prometheus.Metric, m *store.Metrics, now time.Time) {
	db := m.Name
	collectValues(ch, db, m, values, labelled)
	for _, v := range histograms {
		ch <- constHistogram(v.desc, v.get(m), db)
	}
	for k, x := range m.ProxyTierLookups {
		ch <- prometheus.MustNewConstMetric(dTierLookups, prometheus.CounterValue, x, db, k.Tier, k.Result)
	}
	for tier, h := range m.ProxyTierFetchSeconds {
		ch <- constHistogram(dTierSeconds, h, db, tier)
	}
	if !m.AppliedTime.IsZero() {
		ch <- prometheus.MustNewConstMetric(dLogClockAhead, prometheus.GaugeValue, m.AppliedTime.Sub(now).Seconds(), db)
	}
}

func constHistogram(d *prometheus.Desc, h store.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Cumulative[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, labels...)
}
