package raftroot

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/quicksilver-kv/qs/internal/store"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrNoLeader: no leader was known within the proposal timeout; the write
// was not proposed. It wraps store.ErrUnavailable (HTTP 503: retry).
var ErrNoLeader = fmt.Errorf("%w: no raft leader", store.ErrUnavailable)

// ErrStopped: the node is shutting down.
var ErrStopped = fmt.Errorf("%w: raft node stopped", store.ErrUnavailable)

// Node is one member of a replicated root. It owns the Raft state machine
// (a raft.RawNode), its storage and transport, and is the only writer of
// its store: every committed command is applied with store.ApplyRaft.
type Node struct {
	cfg  Config
	st   *store.Store
	log  *slog.Logger
	rn   *raft.RawNode
	disk *diskStorage
	tr   messenger

	clock clockwork.Clock // see seams.go
	// started is the clock's reading at start: real time elapsed since
	// bounds the dates of proposals (proposalTime).
	started time.Time
	ticker  clockwork.Ticker

	inbox   chan *pb.Message
	props   chan func() // run on the loop goroutine
	reports chan func()
	quit    chan struct{}
	done    chan struct{}

	// Owned by the loop goroutine.
	confState     *pb.ConfState
	joinFetch     bool // a joining member fetches a checkpoint before it starts
	lastSnapIndex uint64
	lastHeartbeat time.Time
	lead          uint64
	lastSync      time.Time // of the store (see maybeSyncStore)
	syncedRaft    uint64
	logBytes      int // entry data appended since the last compaction

	mu struct {
		sync.Mutex
		waiters  map[[16]byte]chan store.RaftResult
		status   Status
		members  map[uint64]string // raft address by member id
		leaderCh chan struct{}     // closed and replaced when the leader changes
	}
}

// Status is what a member knows of the cluster.
type Status struct {
	NodeID  uint64            `json:"node_id"`
	Leader  uint64            `json:"leader"`
	State   string            `json:"state"` // StateLeader, StateFollower, ...
	Term    uint64            `json:"term"`
	Commit  uint64            `json:"commit_index"`
	Applied uint64            `json:"applied_index"`
	Members map[uint64]string `json:"members"` // raft addresses
	// Removed: the membership this member applied does not include it
	// (it was removed): it takes no part in the cluster any more, and
	// what its store holds stops following the root's writes.
	Removed bool `json:"removed"`
}

// Start opens the Raft storage, listens on cfg.Listen and runs the member.
// st must be the database's store, opened and used by nothing else for
// writes.
func Start(cfg Config, st *store.Store) (*Node, error) {
	return start(cfg, st, wallClock, func(cfg Config, in inbound, log *slog.Logger) (messenger, error) {
		return connectTCP(cfg, st.DBID(), in, log)
	})
}

// start runs a member on the given clock, with the messenger connect
// returns for its configuration (defaults filled in; see seams.go).
func start(cfg Config, st *store.Store, clock clockwork.Clock, connect func(Config, inbound, *slog.Logger) (messenger, error)) (*Node, error) {
	cfg.Peers = maps.Clone(cfg.Peers) // the caller's map is theirs to change
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, st: st, clock: clock, log: cfg.Logger.With("db", cfg.Database, "raft_node", cfg.NodeID),
		inbox: make(chan *pb.Message, 4096), props: make(chan func(), 1024), reports: make(chan func(), 1024),
		quit: make(chan struct{}), done: make(chan struct{})}
	n.started = clock.Now()
	n.mu.waiters = map[[16]byte]chan store.RaftResult{}
	n.mu.members = map[uint64]string{}
	n.mu.leaderCh = make(chan struct{})
	cluster := st.DBID()
	disk, fresh, err := openDiskStorage(cfg.Dir, cfg.FS, cluster, cfg.NodeID, n.log)
	if err != nil {
		return nil, err
	}
	n.disk = disk
	if fresh {
		if n.joinFetch, err = n.checkNewMember(); err != nil {
			disk.close()
			return nil, err
		}
	}
	rcfg := &raft.Config{
		ID:              cfg.NodeID,
		ElectionTick:    cfg.ElectionTicks,
		HeartbeatTick:   cfg.HeartbeatTicks,
		Storage:         disk.mem,
		MaxSizePerMsg:   cfg.MaxSizePerMsg,
		MaxInflightMsgs: cfg.MaxInflightMsgs,
		// A member applies at most 64 MiB of entries per Ready.
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: 1 << 30,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		Logger:                    raftLogger{n.log},
	}
	if n.rn, err = raft.NewRawNode(rcfg); err != nil {
		disk.close()
		return nil, fmt.Errorf("raft node %d: %w", cfg.NodeID, err)
	}
	// Members: the configured peers, then what the snapshot and the log
	// say (applied as the log is replayed).
	snap, _ := disk.mem.Snapshot()
	n.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
	n.lastSnapIndex = snap.GetMetadata().GetIndex()
	if sd, err := decodeSnapData(snap.GetData()); err == nil {
		for id, a := range sd.Members {
			n.mu.members[id] = a
		}
	}
	for id, a := range cfg.Peers {
		n.mu.members[id] = a
	}
	if fresh && !cfg.Join {
		var peers []raft.Peer
		for _, id := range slices.Sorted(maps.Keys(cfg.Peers)) {
			peers = append(peers, raft.Peer{ID: id, Context: []byte(cfg.Peers[id])})
		}
		if err := n.rn.Bootstrap(peers); err != nil {
			disk.close()
			return nil, fmt.Errorf("raft bootstrap: %w", err)
		}
		n.log.Info("raft cluster bootstrapped", "members", cfg.Peers)
	}
	in := inbound{
		deliver: func(m *pb.Message) bool {
			select {
			case n.inbox <- m:
				return true
			default:
				return false
			}
		},
		known:       n.isKnown,
		memberAddr:  n.memberAddr,
		unreachable: func(id uint64) { n.report(func() { n.rn.ReportUnreachable(id) }) },
		snapshotDone: func(id uint64, ok bool) {
			st := raft.SnapshotFinish
			ev := "sent"
			if !ok {
				st, ev = raft.SnapshotFailure, "send_failed"
			}
			n.cfg.Metrics.snapshots.WithLabelValues(cfg.Database, ev).Inc()
			n.report(func() { n.rn.ReportSnapshot(id, st) })
		},
	}
	if n.tr, err = connect(cfg, in, n.log); err != nil {
		disk.close()
		return nil, err
	}
	for id, a := range n.mu.members {
		n.tr.setPeer(id, a)
	}
	n.ticker = clock.NewTicker(cfg.TickInterval)
	n.updateStatus()
	go n.run()
	return n, nil
}

// Addr is the address the transport listens on.
func (n *Node) Addr() string {
	tr, ok := n.tr.(*transport)
	if !ok {
		return n.cfg.Listen
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.mu.ln == nil {
		return n.cfg.Listen
	}
	return tr.mu.ln.Addr().String()
}

func (n *Node) isKnown(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.mu.members[id]
	return ok
}

// memberAddr is member id's Raft address in the membership.
func (n *Node) memberAddr(id uint64) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.members[id]
}

func (n *Node) report(f func()) {
	select {
	case n.reports <- f:
	default:
	}
}

// Stop ends the member: the loop, the transport and the storage. Writes
// waiting fail with ErrStopped. The store stays open.
func (n *Node) Stop() error {
	select {
	case <-n.quit:
		<-n.done
		return nil
	default:
	}
	close(n.quit)
	<-n.done
	n.tr.close()
	return n.disk.close()
}

// run is the member's one goroutine: it ticks Raft, feeds it messages and
// proposals, and handles every Ready (persist, send, apply, advance).
func (n *Node) run() {
	defer close(n.done)
	if n.joinFetch && !n.fetchForJoin() {
		n.failWaiters()
		return
	}
	defer n.ticker.Stop()
	for {
		select {
		case <-n.quit:
			n.failWaiters()
			return
		case <-n.ticker.Chan():
			n.rn.Tick()
			n.maybeHeartbeat()
			n.maybeSyncStore()
		case m := <-n.inbox:
			n.step(m)
		case f := <-n.props:
			f()
		case f := <-n.reports:
			f()
		}
		// Take whatever else is waiting, so one Ready carries it all.
	drain:
		for i := 0; i < 1024; i++ {
			select {
			case m := <-n.inbox:
				n.step(m)
			case f := <-n.props:
				f()
			case f := <-n.reports:
				f()
			default:
				break drain
			}
		}
		for n.rn.HasReady() {
			if err := n.handleReady(); err != nil {
				n.log.Error("raft member stopped: its state could not be made durable; restart the process", "err", err)
				n.failWaiters()
				// Keep answering nothing: a member that cannot persist
				// must not vote or acknowledge. Wait for shutdown.
				<-n.quit
				return
			}
		}
	}
}

func (n *Node) step(m *pb.Message) {
	if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		n.log.Debug("raft step", "err", err)
	}
}

func (n *Node) handleReady() error {
	rd := n.rn.Ready()
	if rd.SoftState != nil {
		n.softState(rd.SoftState)
	}
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		if err := n.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	// A leader sends its appends while it persists the same entries (the
	// Raft thesis, 10.2.1; etcd does the same): they commit once a quorum,
	// which may or may not include the leader, has them durably. Its
	// term and vote were made durable before it became leader. Everyone
	// else persists first: a vote or an acknowledgement must never get
	// ahead of the disk.
	early := n.rn.BasicStatus().RaftState == raft.StateLeader && !n.hardStateChanges(rd.HardState)
	if early {
		n.tr.send(rd.Messages)
	}
	t0 := time.Now()
	if err := n.disk.save(rd.HardState, rd.Entries, rd.Snapshot, rd.MustSync); err != nil {
		return err
	}
	n.cfg.Metrics.persistSeconds.WithLabelValues(n.cfg.Database).Observe(time.Since(t0).Seconds())
	for _, e := range rd.Entries {
		n.logBytes += len(e.GetData())
	}
	if ce := rd.CommittedEntries; n.cfg.AfterPersist != nil && len(ce) > 0 && ce[len(ce)-1].GetIndex() > n.st.RaftApplied() {
		n.cfg.AfterPersist(ce[len(ce)-1].GetIndex())
	}
	if !early {
		n.tr.send(rd.Messages)
	}
	if len(rd.CommittedEntries) > 0 {
		if !n.apply(rd.CommittedEntries) {
			return nil // stopping
		}
	}
	n.rn.Advance(rd)
	n.maybeCompact()
	n.updateStatus()
	return nil
}

// hardStateChanges reports whether hs changes the term or vote on disk.
func (n *Node) hardStateChanges(hs *pb.HardState) bool {
	if hs == nil || raft.IsEmptyHardState(hs) {
		return false
	}
	cur, _, _ := n.disk.mem.InitialState()
	return hs.GetTerm() != cur.GetTerm() || hs.GetVote() != cur.GetVote()
}

func (n *Node) softState(ss *raft.SoftState) {
	if ss.Lead != n.lead {
		n.lead = ss.Lead
		n.cfg.Metrics.leaderChanges.WithLabelValues(n.cfg.Database).Inc()
		n.log.Info("raft leader changed", "leader", ss.Lead, "state", ss.RaftState.String())
		n.mu.Lock()
		n.mu.status.Leader = ss.Lead
		close(n.mu.leaderCh)
		n.mu.leaderCh = make(chan struct{})
		n.mu.Unlock()
	}
	if ss.RaftState == raft.StateLeader {
		n.cfg.Metrics.isLeader.WithLabelValues(n.cfg.Database).Set(1)
	} else {
		n.cfg.Metrics.isLeader.WithLabelValues(n.cfg.Database).Set(0)
	}
}

// maybeSyncStore makes the store's applied commands durable once a second
// (one fsync), bounding what a restart applies again from the Raft log.
func (n *Node) maybeSyncStore() {
	if n.clock.Since(n.lastSync) < storeSyncInterval || n.st.RaftApplied() == n.syncedRaft {
		return
	}
	n.lastSync = n.clock.Now()
	applied := n.st.RaftApplied()
	if err := n.st.SyncRaft(); err != nil {
		n.log.Warn("store sync failed", "err", err)
		return
	}
	n.syncedRaft = applied
}

const storeSyncInterval = time.Second

// maybeHeartbeat: the leader proposes a heartbeat entry when nothing was
// written for the heartbeat interval.
func (n *Node) maybeHeartbeat() {
	hb := n.cfg.Heartbeat
	if hb <= 0 || n.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	now := n.clock.Now()
	if n.wall().Sub(n.st.AppliedTime()) < hb || now.Sub(n.lastHeartbeat) < hb {
		return
	}
	n.lastHeartbeat = now
	c := command{time: n.proposalTime(), heartbeat: true}
	rand.Read(c.id[:])
	if err := n.rn.Propose(c.encode()); err != nil {
		n.log.Debug("heartbeat not proposed", "err", err)
	}
}

// proposalTime is the date of a proposal made now: the wall clock
// (Config.Now), bounded from the log's time by the real time elapsed on
// the member's clock, so that a member whose wall clock is far ahead
// (a new leader's first heartbeat, a write after a restart) cannot date
// the log ahead (store.Store.ProposalTime).
func (n *Node) proposalTime() int64 {
	return n.st.ProposalTime(n.wall(), n.clock.Since(n.started))
}

// wall is the wall clock proposals are dated by (Config.Now).
func (n *Node) wall() time.Time {
	if n.cfg.Now != nil {
		return n.cfg.Now()
	}
	return n.clock.Now()
}

func (n *Node) updateStatus() {
	bs := n.rn.BasicStatus()
	var voters []uint64
	if n.confState != nil {
		voters = n.confState.GetVoters()
	}
	removed := isRemoved(n.confState, n.cfg.NodeID)
	n.mu.Lock()
	members := map[uint64]string{}
	for _, id := range voters {
		members[id] = n.mu.members[id]
	}
	was := n.mu.status.Removed
	n.mu.status = Status{NodeID: n.cfg.NodeID, Leader: bs.Lead, State: bs.RaftState.String(),
		Term: bs.HardState.GetTerm(), Commit: bs.HardState.GetCommit(), Applied: n.st.RaftApplied(), Members: members,
		Removed: removed}
	n.mu.Unlock()
	db := n.cfg.Database
	if removed && !was {
		n.log.Error("this member was removed from the raft membership: it no longer follows the cluster; stop it, or add it again with a new id and an empty data directory")
	}
	if removed {
		n.cfg.Metrics.removed.WithLabelValues(db).Set(1)
	} else {
		n.cfg.Metrics.removed.WithLabelValues(db).Set(0)
	}
	n.cfg.Metrics.term.WithLabelValues(db).Set(float64(bs.HardState.GetTerm()))
	n.cfg.Metrics.commit.WithLabelValues(db).Set(float64(bs.HardState.GetCommit()))
	n.cfg.Metrics.applied.WithLabelValues(db).Set(float64(n.st.RaftApplied()))
	n.cfg.Metrics.applyLag.WithLabelValues(db).Set(float64(bs.HardState.GetCommit()) - float64(min(n.st.RaftApplied(), bs.HardState.GetCommit())))
	first, _ := n.disk.mem.FirstIndex()
	last, _ := n.disk.mem.LastIndex()
	n.cfg.Metrics.logEntries.WithLabelValues(db).Set(float64(last + 1 - first))
	n.cfg.Metrics.storageBytes.WithLabelValues(db).Set(float64(n.disk.sizeBytes()))
}

// isRemoved reports whether a membership (cs) that has members leaves id
// out: the member was removed. An empty one (a member joining, before it
// got the cluster's state) removes no one.
func isRemoved(cs *pb.ConfState, id uint64) bool {
	if cs == nil || len(cs.GetVoters())+len(cs.GetLearners()) == 0 {
		return false
	}
	return !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) &&
		!slices.Contains(cs.GetVotersOutgoing(), id) && !slices.Contains(cs.GetLearnersNext(), id)
}

// Removed reports whether this member was removed from the membership.
func (n *Node) Removed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.status.Removed
}

// Status returns the member's view of the cluster.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.mu.status
	s.Members = maps.Clone(s.Members)
	return s
}

func (n *Node) failWaiters() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, w := range n.mu.waiters {
		w <- store.RaftResult{Err: ErrStopped}
		delete(n.mu.waiters, id)
	}
}
