package repl

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "repl"

// Stream error kinds, the values of the "kind" label of errors_total.
const (
	kindGap       = "gap"     // an entry did not follow the previous index
	kindHash      = "hash"    // an entry's hash did not chain
	kindCRC       = "crc"     // a frame failed its checksum
	kindDecode    = "decode"  // a frame or message could not be decoded
	kindTimeout   = "timeout" // no entry or progress within the idle timeout
	kindRefused   = "refused" // the server refused the handshake
	kindIO        = "io"      // dial, read or write failed
	kindApply     = "apply"   // the store failed to apply a verified batch
	kindProto     = "protocol"
	kindBootstrap = "bootstrap_needed" // the source cannot serve the log we need
	kindDiskFull  = "disk_full"        // a snapshot does not fit above the free-space reserve
	kindSignature = "signature"        // a signed head did not verify, or the entries did not match it
	kindUnsigned  = "unsigned"         // too many entries arrived without a signed head
	kindForked    = "forked"           // the replica's log forked from its source's
	// kindSeal (seal.go): a snapshot without the root's seal, or whose
	// seal does not verify.
)

var (
	mServerConns = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "server_connections",
		Help: "Replication clients connected to this server."}))
	mRefusals = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "refusals_total",
		Help: "Handshakes refused by this server, by code."}, []string{"code"}))
	mEntriesSent = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_sent_total",
		Help: "Log entries sent to replication clients."}))
	mEntriesRelayed = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_relayed_total",
		Help: "Log entries sent to child replicas before this node made them durable (cut-through); included in entries_sent_total."}))
	mEntriesApplied = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_applied_total",
		Help: "Replicated entries verified and applied."}, []string{"db"}))
	mBatchSize = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_batch_entries",
		Help:    "Entries per durable replicated commit.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14)}))
	mApplySeconds = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_seconds",
		Help: "Latency of one durable replicated commit.", Buckets: metrics.LatencyBuckets}))
	mErrors = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "errors_total",
		Help: "Replication stream errors on the client side, by kind."}, []string{"db", "kind"}))
	mClientRefused = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "client_refusals_total",
		Help: "Refusals received from sources, by code."}, []string{"db", "code"}))
	mReconnects = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reconnects_total",
		Help: "Connection attempts after the first."}, []string{"db"}))
	mLag = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "lag_seconds",
		Help: "Now minus the root time of the last applied entry (before the first: the time since the replica started). Below 0: that entry is dated in this node's future (a clock is wrong), and the lag is unknown."}, []string{"db"}))
	mForked = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "forked",
		Help: "1 while the replica's log forked from its source's: it applies nothing more until qs repair."}, []string{"db"}))
	mSignedIndex = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "signed_index",
		Help: "Index of the newest head signed by the root that this replica verified (0: none, or no root_public_key)."}, []string{"db"}))
	mAppliedIndex = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "applied_index",
		Help: "Applied index of the replica."}, []string{"db"}))
	mStreaming = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "streaming",
		Help: "1 while the replica streams from a source."}, []string{"db"}))
	mSnapshotsHeld = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshots_held",
		Help: "Snapshots this server keeps on disk for bootstrapping replicas."}))
	mSnapshotsActive = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshot_transfers",
		Help: "Snapshot transfers this server is sending."}))
	mSnapshotsServed = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshot_transfers_total",
		Help: "Snapshot transfers this server ended, by result (complete, broken, unavailable, bad_resume, unsealable: a replica asked for the root's seal and this node neither holds the signing key nor relays to its source; relayed: a bootstrap asking for the seal passed on to this replica's source and its whole answer copied back; one whose answer stopped short counts as broken)."}, []string{"result"}))
	mSnapshotBytesSent = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshot_bytes_sent_total",
		Help: "Snapshot file bytes sent to bootstrapping replicas."}))
	mBootstraps = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstraps_total",
		Help: "Bootstrap sessions of this replica, by result (installed, interrupted, failed, seal_refused: the snapshot was not sealed by the root and was discarded)."}, []string{"db", "result"}))
	mBootstrapBytes = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstrap_bytes_total",
		Help: "Snapshot file bytes received and written."}, []string{"db"}))
	mBootstrapResumedBytes = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstrap_resumed_bytes_total",
		Help: "Snapshot bytes already on disk when a bootstrap resumed (not sent again)."}, []string{"db"}))
	mFetchConns = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_connections",
		Help: "Fetch connections of proxies open on this server."}))
	mFetchRequests = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_requests_total",
		Help: "Fetch requests answered (one view each)."}))
	mFetchQuiet = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_quiet_total",
		Help: "Fetch requests a relay answered without publishing their values on its prefetch stream: quiet fetches (a proxy's shard warm-up)."}))
	mFetchKeys = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_keys_total",
		Help: "Keys asked by fetch requests, by result (ok, absent, behind, gone, mismatch, error, skipped)."}, []string{"result"}))
	mFetchCatchUp = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_catchup_total",
		Help: "Fetch requests that asked for an index this node had not applied yet and waited for it (up to 100ms), by result: caught_up (answered at that index), timeout (answered behind)."}, []string{"result"}))
	mFetchTooLarge = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_values_too_large_total",
		Help: "Keys of fetch requests answered error because their value is larger than an answer can carry (MaxFetchValueBytes); also counted in fetch_keys_total{result=\"error\"}."}))
	mFetchRefused = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_bad_requests_total",
		Help: "Fetch and L2 connections closed for bad input, by reason (decode, crc, unexpected)."}, []string{"reason"}))
	mShardKeys = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "shard_keys_total",
		Help: "Keys asked by L2 requests of the other proxies of this node's data centre, by result: hit (the version asked, answered from memory or disk), miss (not held here, or another version)."}, []string{"result"}))
	mFetchSeconds = metrics.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_seconds",
		Help: "Time to answer one fetch request, on the server.", Buckets: metrics.LatencyBuckets}))
	mBootstrapping = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstrapping",
		Help: "1 while the replica downloads or installs a snapshot (or waits for the host's bootstrap lock)."}, []string{"db"}))
)
