package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "proxy"

var (
	mFetchSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetch_seconds",
		Help: "Time to get the remote values of one proxy read from replicas, retries included.", Buckets: metrics.LatencyBuckets}, []string{"db"}))
	mFetches = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "fetches_total",
		Help: "Remote fetches of proxy reads, by result (ok, failed; too_large: a value larger than a fetch answer can carry, refused at once), attempts beyond the first (retried), and requests sent to a fallback member because no preferred member could answer (fallback: the upstream sources, or a proxy's replicas when its relays do not answer)."}, []string{"db", "result"}))
	mReplicaRequests = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_requests_total",
		Help: "Fetch requests sent to each replica, by result: ok, partial (some keys behind or gone), error (connection, refusal), timeout (no byte for the attempt timeout, or slower than the minimum fetch rate), bad_answer (wrong version, length, CRC or digest), aborted (its connection closed by the proxy after another request on it timed out; not held against the replica)."}, []string{"db", "replica", "result"}))
	mReplicaUp = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_up",
		Help: "1 while a replica is in service, 0 while it is sidelined after errors."}, []string{"db", "replica"}))
	mReplicaLatency = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_latency_seconds",
		Help: "Moving average of a replica's fetch latency."}, []string{"db", "replica"}))
	mReplicaApplied = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "replica_applied_index",
		Help: "A replica's applied index, as of its last answer."}, []string{"db", "replica"}))
)

var (
	mMemberChanges = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "member_changes_total",
		Help: "Changes of a proxy pool's members, by change: added, retired (no longer named; it finishes the requests it is answering, then its connections close and its series go), retiered (moved between preferred and fallback)."}, []string{"db", "change"}))
	mMembers = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "members",
		Help: "Members of a proxy pool in service, by tier (preferred: relays, or a relay's replicas; fallback)."}, []string{"db", "tier"}))
)

// FetchResults returns the remote fetches of database db's proxy reads
// that succeeded and that failed (qs_proxy_fetches_total), for the status
// page's tiers. It reads the two series, creating them at 0 if db's pool
// has not counted yet.
func FetchResults(db string) (ok, failed float64) {
	read := func(result string) float64 {
		var m dto.Metric
		if err := mFetches.WithLabelValues(db, result).Write(&m); err != nil {
			return 0
		}
		return m.GetCounter().GetValue()
	}
	return read("ok"), read("failed")
}
