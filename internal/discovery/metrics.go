package discovery

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "discovery"

var (
	mMembers = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "members",
		Help: "Live members of the gossip overlay, this one included."}))
	mGossipBytes = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "gossip_bytes_total",
		Help: "Bytes of the gossip overlay (packets and streams), by direction (in, out)."}, []string{"direction"}))
	mSourceChanges = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "source_changes_total",
		Help: "Sources chosen through the overlay, by database and reason (initial, dead, stalled, failed, cycle, slower)."}, []string{"db", "reason"}))
	mSourceRTT = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "source_rtt_seconds",
		Help: "Estimated round trip to the current replication source (-1: no estimate yet)."}, []string{"db"}))
	mDepth = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "depth",
		Help: "Hops from this node to the database's root (-1: not attached)."}, []string{"db"}))
	mDCRelays = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "dc_relays",
		Help: "Relays of this node's data centre that are not suspect, this node included if it is one, by database (set where a proxy reads its data centre)."}, []string{"db"}))
	mRelay = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "relay",
		Help: "1 while this node is one of its data centre's relays of the database, else 0."}, []string{"db"}))
	mBadMeta = metrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "bad_meta_total",
		Help: "Member metas or coordinates that could not be decoded (the member is ignored until it sends a good one)."}))
	mMetaDropped = metrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "meta_databases_dropped",
		Help: "Databases left out of this member's advertisement because they did not fit memberlist's 512-byte meta."}))
)
