package repl

import (
	"sync"

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

// Metrics are the collectors of the replication servers, replicas and
// prefetch subscriptions that share them: the server builds one per
// process, registers it (it is a prometheus.Collector) and gives it to
// each (ServerConfig.Metrics, ReplicaConfig.Metrics,
// PrefetchConfig.Metrics); one given none counts in a private one,
// registered nowhere. A family with labels appears once one of its
// series is counted, the others from the start.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	// Of a server: its clients, the log and snapshots it sends, the
	// fetches it answers and the reports it receives.
	serverConns         prometheus.Gauge
	refusals            *prometheus.CounterVec
	entriesSent         prometheus.Counter
	entriesRelayed      prometheus.Counter
	snapshotsHeld       prometheus.Gauge
	snapshotTransfers   prometheus.Gauge
	snapshotsServed     *prometheus.CounterVec
	snapshotBytesSent   prometheus.Counter
	fetchConns          prometheus.Gauge
	fetchRequests       prometheus.Counter
	fetchQuiet          prometheus.Counter
	fetchKeys           *prometheus.CounterVec
	fetchCatchUp        *prometheus.CounterVec
	fetchTooLarge       prometheus.Counter
	fetchRefused        *prometheus.CounterVec
	shardKeys           *prometheus.CounterVec
	fetchSeconds        prometheus.Histogram
	prefetchSubscribers prometheus.Gauge
	prefetchPublished   *prometheus.CounterVec
	reportsReceived     *prometheus.CounterVec
	reportsDropped      *prometheus.CounterVec

	// Of a replica, by database.
	entriesApplied        *prometheus.CounterVec
	batchSize             prometheus.Histogram
	applySeconds          prometheus.Histogram
	errors                *prometheus.CounterVec
	clientRefused         *prometheus.CounterVec
	reconnects            *prometheus.CounterVec
	lag                   *prometheus.GaugeVec
	forked                *prometheus.GaugeVec
	signedIndex           *prometheus.GaugeVec
	appliedIndex          *prometheus.GaugeVec
	streaming             *prometheus.GaugeVec
	bootstraps            *prometheus.CounterVec
	bootstrapBytes        *prometheus.CounterVec
	bootstrapResumedBytes *prometheus.CounterVec
	bootstrapping         *prometheus.GaugeVec
	rootKnown             *prometheus.GaugeVec
	reportsSent           *prometheus.CounterVec
	reportsUnsent         *prometheus.CounterVec

	// Of a proxy's prefetch subscriptions, by database.
	prefetched      *prometheus.CounterVec
	prefetchRefused *prometheus.CounterVec

	// Series of the fetch and prefetch paths, resolved on first use so
	// that a request does no label lookup.
	fetchKeysBy     [len(fetchStatusNames)]counterOnUse
	caughtUp        counterOnUse
	catchUpTimedOut counterOnUse
	shardHits       counterOnUse
	shardMisses     counterOnUse
	prefetchQueued  counterOnUse
	prefetchDropped counterOnUse
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		serverConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "server_connections",
			Help: "Replication clients connected to this server."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "refusals_total",
			Help: "Handshakes refused by this server, by code."}, []string{"code"}),
		entriesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_sent_total",
			Help: "Log entries sent to replication clients."}),
		entriesRelayed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_relayed_total",
			Help: "Log entries sent to child replicas before this node made them durable (cut-through); included in entries_sent_total."}),
		entriesApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "entries_applied_total",
			Help: "Replicated entries verified and applied."}, []string{"db"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_batch_entries",
			Help:    "Entries per durable replicated commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_seconds",
			Help: "Latency of one durable replicated commit.", Buckets: metrics.LatencyBuckets}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "errors_total",
			Help: "Replication stream errors on the client side, by kind."}, []string{"db", "kind"}),
		clientRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "client_refusals_total",
			Help: "Refusals received from sources, by code."}, []string{"db", "code"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reconnects_total",
			Help: "Connection attempts after the first."}, []string{"db"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "lag_seconds",
			Help: "Now minus the root time of the last applied entry (before the first: the time since the replica started). Below 0: that entry is dated in this node's future (a clock is wrong), and the lag is unknown."}, []string{"db"}),
		forked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "forked",
			Help: "1 while the replica's log forked from its source's: it applies nothing more until qs repair."}, []string{"db"}),
		signedIndex: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "signed_index",
			Help: "Index of the newest head signed by the root that this replica verified (0: none, or no root_public_key)."}, []string{"db"}),
		appliedIndex: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "applied_index",
			Help: "Applied index of the replica."}, []string{"db"}),
		streaming: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "streaming",
			Help: "1 while the replica streams from a source."}, []string{"db"}),
		snapshotsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshots_held",
			Help: "Snapshots this server keeps on disk for bootstrapping replicas."}),
		snapshotTransfers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshot_transfers",
			Help: "Snapshot transfers this server is sending."}),
		snapshotsServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshot_transfers_total",
			Help: "Snapshot transfers this server ended, by result (complete, broken, unavailable, bad_resume, unsealable: a replica asked for the root's seal and this node neither holds the signing key nor relays to its source; relayed: a bootstrap asking for the seal passed on to this replica's source and its whole answer copied back; one whose answer stopped short counts as broken)."}, []string{"result"}),
		snapshotBytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshot_bytes_sent_total",
			Help: "Snapshot file bytes sent to bootstrapping replicas."}),
		bootstraps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstraps_total",
			Help: "Bootstrap sessions of this replica, by result (installed, interrupted, failed, seal_refused: the snapshot was not sealed by the root and was discarded)."}, []string{"db", "result"}),
		bootstrapBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstrap_bytes_total",
			Help: "Snapshot file bytes received and written."}, []string{"db"}),
		bootstrapResumedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstrap_resumed_bytes_total",
			Help: "Snapshot bytes already on disk when a bootstrap resumed (not sent again)."}, []string{"db"}),
		fetchConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_connections",
			Help: "Fetch connections of proxies open on this server."}),
		fetchRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_requests_total",
			Help: "Fetch requests answered (one view each)."}),
		fetchQuiet: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_quiet_total",
			Help: "Fetch requests a relay answered without publishing their values on its prefetch stream: quiet fetches (a proxy's shard warm-up)."}),
		fetchKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_keys_total",
			Help: "Keys asked by fetch requests, by result (ok, absent, behind, gone, mismatch, error, skipped)."}, []string{"result"}),
		fetchCatchUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_catchup_total",
			Help: "Fetch requests that asked for an index this node had not applied yet and waited for it (up to 100ms), by result: caught_up (answered at that index), timeout (answered behind)."}, []string{"result"}),
		fetchTooLarge: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_values_too_large_total",
			Help: "Keys of fetch requests answered error because their value is larger than an answer can carry (MaxFetchValueBytes); also counted in fetch_keys_total{result=\"error\"}."}),
		fetchRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_bad_requests_total",
			Help: "Fetch and L2 connections closed for bad input, by reason (decode, crc, unexpected)."}, []string{"reason"}),
		shardKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "shard_keys_total",
			Help: "Keys asked by L2 requests of the other proxies of this node's data centre, by result: hit (the version asked, answered from memory or disk), miss (not held here, or another version)."}, []string{"result"}),
		fetchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_seconds",
			Help: "Time to answer one fetch request, on the server.", Buckets: metrics.LatencyBuckets}),
		bootstrapping: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bootstrapping",
			Help: "1 while the replica downloads or installs a snapshot (or waits for the host's bootstrap lock)."}, []string{"db"}),
		prefetched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "prefetched_total",
			Help: "Values a proxy received on its relays' prefetch streams, by result: received, admitted (held by its transient tier), dropped (no transient tier, the version already held, or larger than the tier)."}, []string{"db", "result"}),
		prefetchRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "prefetch_refused_total",
			Help: "Prefetch stream messages a proxy refused (then it reconnects), by reason: crc (a frame failed its checksum), decode (malformed), truncated (the stream ended inside a frame), unexpected (a message a prefetch stream does not carry)."}, []string{"db", "reason"}),
		rootKnown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "root_known",
			Help: "1 while this replica knows the HTTP address of its database's root (its source told it), which its not_root answers name; 0 while it does not."}, []string{"db"}),
		reportsReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reports_received_total",
			Help: "Reports received from replication clients and handed on, by database."}, []string{"db"}),
		reportsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reports_dropped_total",
			Help: "Reports received and dropped, by reason: rate, too_large, invalid, no_sink."}, []string{"reason"}),
		reportsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reports_sent_total",
			Help: "Reports sent to sources, by database."}, []string{"db"}),
		reportsUnsent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reports_unsent_total",
			Help: "Reports not sent, by database and reason: too_large (over MaxReportBytes), write (the connection failed)."}, []string{"db", "reason"}),
		prefetchSubscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "prefetch_subscribers",
			Help: "Proxies subscribed to this relay's prefetch stream."}),
		prefetchPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "prefetch_published_total",
			Help: "Values this relay resolved, offered to each subscriber of its prefetch stream, by result: queued, dropped (the subscriber's queue was full)."}, []string{"result"}),
	}
	m.Group = metrics.Group{
		m.serverConns, m.refusals, m.entriesSent, m.entriesRelayed, m.snapshotsHeld, m.snapshotTransfers,
		m.snapshotsServed, m.snapshotBytesSent, m.fetchConns, m.fetchRequests, m.fetchQuiet, m.fetchKeys,
		m.fetchCatchUp, m.fetchTooLarge, m.fetchRefused, m.shardKeys, m.fetchSeconds, m.prefetchSubscribers,
		m.prefetchPublished, m.reportsReceived, m.reportsDropped,
		m.entriesApplied, m.batchSize, m.applySeconds, m.errors, m.clientRefused, m.reconnects, m.lag,
		m.forked, m.signedIndex, m.appliedIndex, m.streaming, m.bootstraps, m.bootstrapBytes,
		m.bootstrapResumedBytes, m.bootstrapping, m.rootKnown, m.reportsSent, m.reportsUnsent,
		m.prefetched, m.prefetchRefused,
	}
	return m
}

// addFetchKeys counts the keys of one fetch answer by status.
func (m *Metrics) addFetchKeys(counts *[len(fetchStatusNames)]int) {
	for s, n := range counts {
		if n > 0 {
			m.fetchKeysBy[s].of(m.fetchKeys, fetchStatusNames[s]).Add(float64(n))
		}
	}
}

// addPublished counts the values a relay offered its prefetch
// subscribers.
func (m *Metrics) addPublished(queued, dropped int) {
	if queued > 0 {
		m.prefetchQueued.of(m.prefetchPublished, "queued").Add(float64(queued))
	}
	if dropped > 0 {
		m.prefetchDropped.of(m.prefetchPublished, "dropped").Add(float64(dropped))
	}
}

// addShardKeys counts the keys of one L2 answer.
func (m *Metrics) addShardKeys(hits, misses int) {
	m.shardHits.of(m.shardKeys, "hit").Add(float64(hits))
	m.shardMisses.of(m.shardKeys, "miss").Add(float64(misses))
}

// countCatchUp counts a fetch that waited for its index.
func (m *Metrics) countCatchUp(caughtUp bool) {
	if caughtUp {
		m.caughtUp.of(m.fetchCatchUp, "caught_up").Inc()
	} else {
		m.catchUpTimedOut.of(m.fetchCatchUp, "timeout").Inc()
	}
}

// counterOnUse is one series of a counter vector, made on its first use
// (so that, as every series, it appears on /metrics once counted) and
// reached afterwards without a label lookup.
type counterOnUse struct {
	once sync.Once
	c    prometheus.Counter
}

// of returns the series of vec with label values lvs; every call on one
// counterOnUse must pass the same vec and values.
func (u *counterOnUse) of(vec *prometheus.CounterVec, lvs ...string) prometheus.Counter {
	u.once.Do(func() { u.c = vec.WithLabelValues(lvs...) })
	return u.c
}
