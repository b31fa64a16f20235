package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "proxy"

// Metrics are the collectors of the pools, L2 tiers and shard warmers
// that share them, every series labelled by database (db): the server
// builds one per process and registers it (it is a prometheus.Collector)
// and gives it to each (Config.Metrics, L2Config.Metrics,
// WarmConfig.Metrics); one given none counts in a private one,
// registered nowhere, which a test reads.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	fetchSeconds    *prometheus.HistogramVec
	fetches         *prometheus.CounterVec
	replicaRequests *prometheus.CounterVec
	replicaUp       *prometheus.GaugeVec
	replicaLatency  *prometheus.GaugeVec
	replicaApplied  *prometheus.GaugeVec
	memberChanges   *prometheus.CounterVec
	members         *prometheus.GaugeVec
	l2Requests      *prometheus.CounterVec
	l2Skipped       *prometheus.CounterVec
	l2PeerUp        *prometheus.GaugeVec
	warm            *prometheus.CounterVec
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		fetchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_seconds",
			Help: "Time to get the remote values of one proxy read from replicas, retries included.", Buckets: metrics.LatencyBuckets}, []string{"db"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetches_total",
			Help: "Remote fetches of proxy reads, by result (ok, failed; too_large: a value larger than a fetch answer can carry, refused at once), attempts beyond the first (retried), and requests sent to a fallback member because no preferred member could answer (fallback: the upstream sources, or a proxy's replicas when its relays do not answer)."}, []string{"db", "result"}),
		replicaRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_requests_total",
			Help: "Fetch requests sent to each replica, by result: ok, partial (some keys behind or gone), error (connection, refusal), timeout (no byte for the attempt timeout, or slower than the minimum fetch rate), bad_answer (wrong version, length, CRC or digest), aborted (its connection closed by the proxy after another request on it timed out; not held against the replica)."}, []string{"db", "replica", "result"}),
		replicaUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_up",
			Help: "1 while a replica is in service, 0 while it is sidelined after errors."}, []string{"db", "replica"}),
		replicaLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_latency_seconds",
			Help: "Moving average of a replica's fetch latency."}, []string{"db", "replica"}),
		replicaApplied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_applied_index",
			Help: "A replica's applied index, as of its last answer."}, []string{"db", "replica"}),
		memberChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "member_changes_total",
			Help: "Changes of a proxy pool's members, by change: added, retired (no longer named; it finishes the requests it is answering, then its connections close and its series go), retiered (moved between preferred and fallback)."}, []string{"db", "change"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "members",
			Help: "Members of a proxy pool in service, by tier (preferred: relays, or a relay's replicas; fallback)."}, []string{"db", "tier"}),
		l2Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "l2_requests_total",
			Help: "L2 requests sent to each peer of the data centre, by result: ok, error (connection, refusal), timeout (no answer within the attempt timeout), bad_answer (another version, or a value that does not match the record: not used, the peer is sidelined)."}, []string{"db", "peer", "result"}),
		l2Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "l2_skipped_total",
			Help: "Keys not asked of L2 because no peer owning their shard was connected (down, sidelined, or none configured): fetched from the next tier."}, []string{"db"}),
		l2PeerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "l2_peer_up",
			Help: "1 while an L2 peer is connected and in service, 0 while it is down or sidelined."}, []string{"db", "peer"}),
		warm: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "shard_warm_total",
			Help: "Values of a proxy's own shard fetched in the background to fill its shard budget, by result: held, not_held (a newer version held meanwhile), bad (not matching its record: dropped, counted as an integrity error), failed (the fetch failed: retried later); and passes: full (a pass stopped at a full budget), done (a pass reached the last key)."}, []string{"db", "result"}),
	}
	m.Group = metrics.Group{m.fetchSeconds, m.fetches, m.replicaRequests, m.replicaUp, m.replicaLatency, m.replicaApplied,
		m.memberChanges, m.members, m.l2Requests, m.l2Skipped, m.l2PeerUp, m.warm}
	return m
}

// orNew returns m, or a private Metrics when m is nil.
func orNew(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics()
	}
	return m
}

// FetchResults returns the remote fetches of database db's proxy reads
// that succeeded and that failed (qs_proxy_fetches_total), for the status
// page's tiers. It reads the two series, creating them at 0 if db's pool
// has not counted yet.
func (m *Metrics) FetchResults(db string) (ok, failed float64) {
	read := func(result string) float64 {
		var d dto.Metric
		if err := m.fetches.WithLabelValues(db, result).Write(&d); err != nil {
			return 0
		}
		return d.GetCounter().GetValue()
	}
	return read("ok"), read("failed")
}
