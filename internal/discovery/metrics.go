package discovery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "discovery"

// Metrics are the collectors of an overlay and of the agents that use it:
// the server builds one per process and registers it (it is a
// prometheus.Collector); an Overlay given none counts in a private one.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	members       prometheus.Gauge
	gossipBytes   *prometheus.CounterVec
	sourceChanges *prometheus.CounterVec
	sourceRTT     *prometheus.GaugeVec
	depth         *prometheus.GaugeVec
	pathStreamed  *prometheus.GaugeVec
	dcRelays      *prometheus.GaugeVec
	relay         *prometheus.GaugeVec
	badMeta       prometheus.Counter
	metaDropped   prometheus.Gauge
	suspects      prometheus.Gauge
	checks        *prometheus.CounterVec
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "members",
			Help: "Live members of the gossip overlay, this one included."}),
		gossipBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "gossip_bytes_total",
			Help: "Bytes of the gossip overlay (packets and streams), by direction (in, out)."}, []string{"direction"}),
		sourceChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "source_changes_total",
			Help: "Sources chosen through the overlay, by database and reason (initial, dead, stalled, failed, cycle, slower, suspect)."}, []string{"db", "reason"}),
		sourceRTT: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "source_rtt_seconds",
			Help: "Estimated round trip to the current replication source (-1: no estimate yet)."}, []string{"db"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "depth",
			Help: "Hops from this node to the database's root (-1: not attached)."}, []string{"db"}),
		pathStreamed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "path_streamed",
			Help: "1 while this node's path to the root is the one its source sent over the replication stream; 0 while it is taken from gossip (a source that sends none, or whose path reaches no root) or the node is not attached."}, []string{"db"}),
		dcRelays: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "dc_relays",
			Help: "Relays of this node's data centre that are not suspect, this node included if it is one, by database (set where a proxy reads its data centre)."}, []string{"db"}),
		relay: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "relay",
			Help: "1 while this node is one of its data centre's relays of the database, else 0."}, []string{"db"}),
		badMeta: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bad_meta_total",
			Help: "Member metas or coordinates that could not be decoded (the member is ignored until it sends a good one)."}),
		metaDropped: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "meta_databases_dropped",
			Help: "Databases left out of this member's advertisement because they did not fit memberlist's 512-byte meta."}),
		suspects: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "suspect_members",
			Help: "Members this node depends on (its data centre's proxies, the nearest full replicas, its sources) or watches (sources it left for suspicion) that missed its last direct probes."}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "dependency_probes_total",
			Help: "Direct probes of the members this node depends on, by result (answered, missed)."}, []string{"result"}),
	}
	m.Group = metrics.Group{m.members, m.gossipBytes, m.sourceChanges, m.sourceRTT, m.depth, m.pathStreamed,
		m.dcRelays, m.relay, m.badMeta, m.metaDropped, m.suspects, m.checks}
	return m
}

// setDC sets the dc_relays and relay gauges of db.
func (m *Metrics) setDC(db string, relays int, self bool) {
	v := 0.0
	if self {
		v = 1
	}
	m.dcRelays.WithLabelValues(db).Set(float64(relays))
	m.relay.WithLabelValues(db).Set(v)
}
