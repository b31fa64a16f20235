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

var (
	mDescriptions = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "descriptions_total",
		Help: "Members' descriptions (HTTP address, replication subtree) exchanged, by outcome: ok and failed (asked of a peer), answered (to a peer)."}, []string{"db", "outcome"}))
	mLeaderChanges = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "leader_changes_total",
		Help: "Times this member saw the leader change (including to no leader)."}, []string{"db"}))
	mIsLeader = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "is_leader",
		Help: "1 when this member is the Raft leader."}, []string{"db"}))
	mRemoved = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "removed",
		Help: "1 when this member was removed from the membership: it takes no part in the cluster, its data stops following the root's, and /healthz answers 503."}, []string{"db"}))
	mTerm = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "term",
		Help: "Current Raft term."}, []string{"db"}))
	mCommit = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "commit_index",
		Help: "Raft commit index known to this member."}, []string{"db"}))
	mApplied = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "applied_index",
		Help: "Raft index applied durably to the store."}, []string{"db"}))
	mApplyLag = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_lag_entries",
		Help: "Committed Raft entries not yet applied to the store."}, []string{"db"}))
	mLogEntries = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_entries",
		Help: "Raft log entries retained (since the last compaction)."}, []string{"db"}))
	mStorageBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "storage_bytes",
		Help: "Disk space of the Raft storage (<data>/<db>.raft)."}, []string{"db"}))
	mProposals = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proposals_total",
		Help: "Writes proposed by this member, by outcome: ok (applied), failed (refused or no leader), timeout (outcome unknown)."}, []string{"db", "outcome"}))
	mForwarded = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "proposals_forwarded_total",
		Help: "Proposals this follower forwarded to the leader."}, []string{"db"}))
	mSnapshots = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "snapshots_total",
		Help: "Raft snapshots: sent (by the leader, ok or failed), received (installed or failed), made (log compactions)."}, []string{"db", "event"}))
	mMessagesSent = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "messages_sent_total",
		Help: "Raft messages written to peers."}, []string{"db"}))
	mMessagesReceived = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "messages_received_total",
		Help: "Raft messages received from peers and accepted."}, []string{"db"}))
	mMessageErrors = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "message_errors_total",
		Help: "Raft transport errors, by kind (see internal/raftroot/metrics.go)."}, []string{"db", "kind"}))
	mPersistSeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "persist_seconds",
		Help:    "Time to make one Ready's entries and hard state durable.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"db"}))
	mApplySeconds = metrics.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "apply_seconds",
		Help:    "Time to apply one Ready's committed entries to the store (one durable commit).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"db"}))
)
