package raftroot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Config configures one member of a replicated root. The zero value of
// every field not marked required means its default, filled in by
// EnsureDefaults.
type Config struct {
	// Database names the database in metrics and logs. Required.
	Database string
	// NodeID is this member's id, unique in the cluster, never reused.
	// Required.
	NodeID uint64
	// Listen is the Raft transport address of this member; peers reach it
	// at Peers[NodeID]. Required.
	Listen string
	// Peers maps every initial member's id to its Raft address (this
	// member included). Later changes go through AddMember/RemoveMember
	// and are kept in the Raft log and snapshots. Required.
	Peers map[uint64]string
	// Join makes a new member of an existing cluster: it starts with no
	// members and waits for the leader, which added it with AddMember.
	Join bool
	// Dir holds the Raft storage. Required.
	Dir string
	// ReplAddr is this member's replication address, told to peers so a
	// member that fell behind the Raft log can fetch a snapshot from it.
	ReplAddr string
	// FetchSnapshot brings the store to a snapshot of the member at src
	// (a replication address) whose store index is at least minIndex.
	// Required.
	FetchSnapshot func(ctx context.Context, src string, minIndex uint64) error

	// TickInterval is Raft's clock tick. Default 100ms.
	TickInterval time.Duration
	// ElectionTicks: a follower that hears no leader for this many ticks
	// (randomised up to twice that) starts an election. Default 10 (1 s).
	ElectionTicks int
	// HeartbeatTicks: the leader's heartbeat interval in ticks. Default 1.
	HeartbeatTicks int
	// SnapshotEntries: a snapshot is recorded and the log compacted once
	// this many entries were applied since the last one. Default 10000.
	SnapshotEntries uint64
	// CatchUpEntries: entries kept after a compaction, so that a follower
	// a little behind catches up from the log. Default 5000.
	CatchUpEntries uint64
	// ProposalTimeout bounds how long a write waits for a leader and for
	// its commit and apply. Default 5s.
	ProposalTimeout time.Duration
	// Heartbeat is how often the leader proposes a heartbeat entry when
	// no other entry was written (replicas measure lag with it). Default
	// 1s; negative disables.
	Heartbeat time.Duration
	// Now, when set, is the wall clock this member dates its proposals
	// by (writes, and heartbeats when it leads); nil: the member's clock.
	// Either way the dates are bounded by the real time elapsed on the
	// member's clock (store.Store.ProposalTime).
	Now func() time.Time
	// MaxSizePerMsg bounds the entries of one append message. Default 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds append messages in flight per follower.
	// Default 256.
	MaxInflightMsgs int

	// Dial opens connections to peers. Default: plain TCP. The server
	// passes the replication TLS dialer (repl_tls) here.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Listener wraps the transport's listener (TLS). Default: none.
	Listener func(net.Listener) net.Listener
	// Describe, when set, makes this member's description, answered to a
	// peer's DescribeMembers (at most MaxDescription bytes). Nil: an empty
	// one.
	Describe func() []byte
	// Ln, when set, is the transport's listener, already listening on
	// Listen (inherited by socket activation, so a restart drops no peer
	// connection). Nil: Start listens on Listen.
	Ln net.Listener

	// AfterPersist, when set, is called after a Ready's state is durable
	// and before its committed entries are applied, when some of them are
	// not applied yet (a test failpoint).
	// Its argument is the last committed index.
	AfterPersist func(committed uint64)

	// Metrics counts this member's events, labelled with Database; the
	// server gives every member of the process the one it registered.
	// Default: a private NewMetrics(), registered nowhere.
	Metrics *Metrics
	// Logger receives events. Default slog.Default().
	Logger *slog.Logger
	// FS is the Raft storage's filesystem. Default vfs.Default.
	FS vfs.FS
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *Config) EnsureDefaults() *Config {
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	if c.CatchUpEntries == 0 {
		c.CatchUpEntries = 5000
	}
	if c.ProposalTimeout == 0 {
		c.ProposalTimeout = 5 * time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = time.Second
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.Listener == nil {
		c.Listener = func(ln net.Listener) net.Listener { return ln }
	}
	return c
}

// Validate reports every invalid field.
func (c *Config) Validate() error {
	var errs []error
	if c.Database == "" {
		errs = append(errs, errors.New("raft: database name required"))
	}
	if c.NodeID == 0 {
		errs = append(errs, errors.New("raft: node id must be at least 1"))
	}
	if c.Listen == "" {
		errs = append(errs, errors.New("raft: listen address required"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("raft: storage directory required"))
	}
	if c.FetchSnapshot == nil {
		errs = append(errs, errors.New("raft: FetchSnapshot required"))
	}
	if _, ok := c.Peers[c.NodeID]; !ok && !c.Join {
		errs = append(errs, fmt.Errorf("raft: peers must include this node (%d)", c.NodeID))
	}
	for id, a := range c.Peers {
		if id == 0 || a == "" {
			errs = append(errs, fmt.Errorf("raft: peer %d=%q invalid", id, a))
		}
	}
	if c.TickInterval < time.Millisecond {
		errs = append(errs, errors.New("raft: tick interval below 1ms"))
	}
	if c.HeartbeatTicks < 1 || c.ElectionTicks <= c.HeartbeatTicks {
		errs = append(errs, fmt.Errorf("raft: election ticks %d must exceed heartbeat ticks %d ≥ 1", c.ElectionTicks, c.HeartbeatTicks))
	}
	if c.CatchUpEntries >= c.SnapshotEntries {
		errs = append(errs, fmt.Errorf("raft: catch-up entries %d must be below snapshot entries %d", c.CatchUpEntries, c.SnapshotEntries))
	}
	if c.ProposalTimeout < 10*time.Millisecond {
		errs = append(errs, errors.New("raft: proposal timeout below 10ms"))
	}
	return errors.Join(errs...)
}
