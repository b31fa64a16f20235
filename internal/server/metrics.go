package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/proxy"
)

// Metrics are the collectors of a Server's own mechanisms: a new
// replica's wait for its sources (wait.go), the expiry of keys
// (expiry.go), a bridged root's entries (bridged.go), the tree of
// replicas and the read samples (reports.go, clustertree.go). The
// process's Server counts in the one registered when the process starts,
// served at /metrics; a Server of a test counts in one of its own.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	sourceWaiting             *prometheus.GaugeVec
	sourceWaitFailures        *prometheus.CounterVec
	expired                   *prometheus.CounterVec
	expiryFailures            *prometheus.CounterVec
	bridgedEntries            *prometheus.CounterVec
	bridgedRefused            *prometheus.CounterVec
	treeNodes                 *prometheus.GaugeVec
	reportsInvalid            *prometheus.CounterVec
	memberDescriptionsInvalid *prometheus.CounterVec
	readSamples               *prometheus.CounterVec
	windowKeys                *prometheus.GaugeVec
	windowDropped             *prometheus.CounterVec
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		sourceWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "server", Name: "source_waiting",
			Help: "1 while a new replica waits for one of its sources to answer before it creates its store.",
		}, []string{"db"}),
		sourceWaitFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "server", Name: "source_wait_failures_total",
			Help: "Failed attempts of a new replica to learn its database id from its sources.",
		}, []string{"db"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "expiry", Name: "deleted_total",
			Help: "Keys this root deleted because their expiry came."}, []string{"db"}),
		expiryFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "expiry", Name: "failures_total",
			Help: "Rounds of expiry that could not write their deletions (retried at the next round)."}, []string{"db"}),
		bridgedEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "bridged", Name: "entries_total",
			Help: "Entries a bridged root appended from its bridge (qs bridge qs), by database.",
		}, []string{"db"}),
		bridgedRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "bridged", Name: "not_contiguous_total",
			Help: "Bridged entries a bridged root refused because they do not follow its log (another bridge, or a diverged root), by database.",
		}, []string{"db"}),
		treeNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "tree", Name: "nodes",
			Help: "Nodes of the replication tree at and below this node, as reported by its children."}, []string{"db"}),
		reportsInvalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "tree", Name: "reports_invalid_total",
			Help: "Reports of children refused: not a valid tree report, or for a database not served here."}, []string{"reason"}),
		memberDescriptionsInvalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "tree", Name: "member_descriptions_invalid_total",
			Help: "Descriptions of replicated root members refused: not a valid description or tree report."}, []string{"db"}),
		readSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "keyuse", Name: "samples_total",
			Help: "Read samples, by database and source: local (reads sampled here), merged (received from children), dropped (over the pending bound)."}, []string{"db", "source"}),
		windowKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "keyuse", Name: "window_keys",
			Help: "Keys a root remembers as read within the retention of its read window."}, []string{"db"}),
		windowDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "keyuse", Name: "window_dropped_total",
			Help: "Read samples of new keys a root's read window dropped because it holds the most keys it may."}, []string{"db"}),
	}
	m.Group = metrics.Group{m.sourceWaiting, m.sourceWaitFailures, m.expired, m.expiryFailures, m.bridgedEntries, m.bridgedRefused,
		m.treeNodes, m.reportsInvalid, m.memberDescriptionsInvalid, m.readSamples, m.windowKeys, m.windowDropped}
	return m
}

// meters are the Metrics a Server counts in: its own, and those of the
// components it builds whose counts its tests read.
type meters struct {
	server *Metrics
	proxy  *proxy.Metrics       // its proxies' pools, L2 tiers and shard warmers
	auth   *clusterauth.Metrics // the internal ports, key reloads and insecure mode
}

// processMeters are those of the Server New makes (one per process),
// registered once in the process registry and served at /metrics.
var processMeters = meters{
	server: metrics.MustRegister(NewMetrics()),
	proxy:  metrics.MustRegister(proxy.NewMetrics()),
	auth:   metrics.MustRegister(clusterauth.NewMetrics()),
}
