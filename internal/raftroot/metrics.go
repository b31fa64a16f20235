package raftroot

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "raft"

// Transport error kinds, the values of the "kind" label of
// message_errors_total.
const (
	kindBadFrame     = "bad_frame"     // a frame failed its checksum, length or type
	kindBadHello     = "bad_hello"     // the first frame was not a valid hello
	kindWrongCluster = "wrong_cluster" // the peer belongs to another cluster (database id)
	kindWrongPeer    = "wrong_peer"    // addressed to another node, or From does not match the hello
	kindUnknownPeer  = "unknown_peer"  // the sender is not a member this node knows
	kindMalformed    = "malformed"     // a message frame did not decode
	kindAuth         = "auth"          // a connection failed authentication (cluster key or TLS)
	kindUnauthorized = "unauthorized"  // a hello from a member the connection did not authenticate as
	kindDial         = "dial"          // could not connect to a peer
	kindWrite        = "write"         // a send failed
	kindQueueFull    = "queue_full"    // a peer's send queue overflowed; messages dropped
	kindInboxFull    = "inbox_full"    // received faster than the node consumes; dropped
	kindCommand      = "bad_command"   // a committed entry's data was not a command (skipped)
	kindDescription  = "description"   // this member's description was over MaxDescription (not answered)
)

// Metrics are the collectors of the Raft members that share them, every
// series labelled by database (db): the server builds one per process and
// registers it (it is a prometheus.Collector); a member given none
// (Config.Metrics) counts in a private one, registered nowhere.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	descriptions     *prometheus.CounterVec
	leaderChanges    *prometheus.CounterVec
	isLeader         *prometheus.GaugeVec
	removed          *prometheus.GaugeVec
	term             *prometheus.GaugeVec
	commit           *prometheus.GaugeVec
	applied          *prometheus.GaugeVec
	applyLag         *prometheus.GaugeVec
	logEntries       *prometheus.GaugeVec
	storageBytes     *prometheus.GaugeVec
	proposals        *prometheus.CounterVec
	forwarded        *prometheus.CounterVec
	snapshots        *prometheus.CounterVec
	messagesSent     *prometheus.CounterVec
	messagesReceived *prometheus.CounterVec
	messageErrors    *prometheus.CounterVec
	persistSeconds   *prometheus.HistogramVec
	applySeconds     *prometheus.HistogramVec
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		descriptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "descriptions_total",
			Help: "Members' descriptions (HTTP address, replication subtree) exchanged, by outcome: ok and failed (asked of a peer), answered (to a peer)."}, []string{"db", "outcome"}),
		leaderChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "leader_changes_total",
			Help: "Times this member saw the leader change (including to no leader)."}, []string{"db"}),
		isLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "is_leader",
			Help: "1 when this member is the Raft leader."}, []string{"db"}),
		removed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "removed",
			Help: "1 when this member was removed from the membership: it takes no part in the cluster, its data stops following the root's, and /healthz answers 503."}, []string{"db"}),
		term: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "term",
			Help: "Current Raft term."}, []string{"db"}),
		commit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "commit_index",
			Help: "Raft commit index known to this member."}, []string{"db"}),
		applied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "applied_index",
			Help: "Raft index applied durably to the store."}, []string{"db"}),
		applyLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_lag_entries",
			Help: "Committed Raft entries not yet applied to the store."}, []string{"db"}),
		logEntries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_entries",
			Help: "Raft log entries retained (since the last compaction)."}, []string{"db"}),
		storageBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "storage_bytes",
			Help: "Disk space of the Raft storage (<data>/<db>.raft)."}, []string{"db"}),
		proposals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proposals_total",
			Help: "Writes proposed by this member, by outcome: ok (applied), failed (refused or no leader), timeout (outcome unknown)."}, []string{"db", "outcome"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proposals_forwarded_total",
			Help: "Proposals this follower forwarded to the leader."}, []string{"db"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshots_total",
			Help: "Raft snapshots: sent (by the leader, ok or failed), received (installed or failed), made (log compactions)."}, []string{"db", "event"}),
		messagesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "messages_sent_total",
			Help: "Raft messages written to peers."}, []string{"db"}),
		messagesReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "messages_received_total",
			Help: "Raft messages received from peers and accepted."}, []string{"db"}),
		messageErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "message_errors_total",
			Help: "Raft transport errors, by kind (see internal/raftroot/metrics.go)."}, []string{"db", "kind"}),
		persistSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "persist_seconds",
			Help:    "Time to make one Ready's entries and hard state durable.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"db"}),
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_seconds",
			Help:    "Time to apply one Ready's committed entries to the store (one durable commit).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"db"}),
	}
	m.Group = metrics.Group{m.descriptions, m.leaderChanges, m.isLeader, m.removed, m.term, m.commit, m.applied, m.applyLag, m.logEntries, m.storageBytes, m.proposals, m.forwarded, m.snapshots, m.messagesSent, m.messagesReceived, m.messageErrors, m.persistSeconds, m.applySeconds}
	return m
}
