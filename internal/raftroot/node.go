package raftroot

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

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
	tr   *transport

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
}

// Start opens the Raft storage, listens on cfg.Listen and runs the member.
// st must be the database's store, opened and used by nothing else for
// writes.
func Start(cfg Config, st *store.Store) (*Node, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, st: st, log: cfg.Logger.With("db", cfg.Database, "raft_node", cfg.NodeID),
		inbox: make(chan *pb.Message, 4096), props: make(chan func(), 1024), reports: make(chan func(), 1024),
		quit: make(chan struct{}), done: make(chan struct{})}
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
		for _, id := range slices.Sorted(mapsKeys(cfg.Peers)) {
			peers = append(peers, raft.Peer{ID: id, Context: []byte(cfg.Peers[id])})
		}
		if err := n.rn.Bootstrap(peers); err != nil {
			disk.close()
			return nil, fmt.Errorf("raft bootstrap: %w", err)
		}
		n.log.Info("raft cluster bootstrapped", "members", cfg.Peers)
	}
	n.tr = newTransport(cfg.Database, cluster, cfg.NodeID, cfg.ReplAddr, cfg.Dial, n.log)
	n.tr.deliver = func(m *pb.Message) bool {
		select {
		case n.inbox <- m:
			return true
		default:
			return false
		}
	}
	n.tr.known = n.isKnown
	n.tr.unreachable = func(id uint64) { n.report(func() { n.rn.ReportUnreachable(id) }) }
	n.tr.snapshotled = func(id uint64, ok bool) {
		st := raft.SnapshotFinish
		ev := "sent"
		if !ok {
			st, ev = raft.SnapshotFailure, "send_failed"
		}
		mSnapshots.WithLabelValues(cfg.Database, ev).Inc()
		n.report(func() { n.rn.ReportSnapshot(id, st) })
	}
	for id, a := range n.mu.members {
		n.tr.setPeer(id, a)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		disk.close()
		return nil, fmt.Errorf("raft listen %s: %w", cfg.Listen, err)
	}
	n.tr.wg.Add(1)
	go func() {
		defer n.tr.wg.Done()
		n.tr.serve(cfg.Listener(ln))
	}()
	n.updateStatus()
	go n.run()
	return n, nil
}

func mapsKeys(m map[uint64]string) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Addr is the address the transport listens on.
func (n *Node) Addr() string {
	n.tr.mu.Lock()
	defer n.tr.mu.Unlock()
	if n.tr.mu.ln == nil {
		return n.cfg.Listen
	}
	return n.tr.mu.ln.Addr().String()
}

func (n *Node) isKnown(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.mu.members[id]
	return ok
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

// ErrStoreNotEmpty: a new member's store already holds data that the
// cluster's log does not start from.
var ErrStoreNotEmpty = errors.New("qs: the store is not the starting state of this raft cluster")

// checkNewMember decides how a member with a new (empty) Raft storage
// starts from its store, so that every member applies the same log to the
// same state:
//   - several initial members: their stores must be empty;
//   - one initial member: its store, whatever it holds, is the cluster's
//     starting state (its Raft index is reset: the new log starts at 1);
//     this is how a single root becomes an HA root;
//   - a joining member: its store must be empty, and it starts from a
//     checkpoint of a member's store (joinFetch), never from an empty state
//     the cluster's log may not start from; a checkpoint installed before
//     a crash (Raft index > 0) is kept.
func (n *Node) checkNewMember() (joinFetch bool, err error) {
	cfg, st := n.cfg, n.st
	empty := st.AppliedIndex() == 0 && st.RaftApplied() == 0
	switch {
	case cfg.Join && st.RaftApplied() > 0:
		// A checkpoint of a member, installed before a crash: its Raft
		// index says where the log continues. (A store of another cluster
		// has another database id, which the peers refuse.)
		return false, nil
	case cfg.Join && !empty:
		return false, fmt.Errorf("%w: a joining member needs an empty store (it copies a member's); %s holds index %d (raft %d)",
			ErrStoreNotEmpty, st.Options().Dir, st.AppliedIndex(), st.RaftApplied())
	case cfg.Join:
		return true, nil
	case len(cfg.Peers) > 1 && !empty:
		return false, fmt.Errorf("%w: the Raft storage %s is new but the store holds index %d (raft %d); a cluster of several members starts from empty stores: "+
			"start this member alone (--raft-peers with itself only) and add the others, or restore its Raft storage",
			ErrStoreNotEmpty, cfg.Dir, st.AppliedIndex(), st.RaftApplied())
	case st.RaftApplied() > 0:
		n.log.Warn("new one-member raft cluster on a store of an earlier cluster: its log starts from the store's state", "store_index", st.AppliedIndex(), "old_raft_index", st.RaftApplied())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return false, st.ResetRaft(ctx)
	}
	return false, nil
}

// fetchForJoin brings a joining member's empty store to a checkpoint of a
// member's store, before it takes part in Raft. It returns false if the
// node stops first.
func (n *Node) fetchForJoin() bool {
	var peers []string
	for id, a := range n.cfg.Peers {
		if id != n.cfg.NodeID {
			peers = append(peers, a)
		}
	}
	for pause := time.Second; ; pause = min(2*pause, 10*time.Second) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-n.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		h, err := askPeers(ctx, peers, n.cfg.Dial)
		if err == nil && h.repl == "" {
			err = fmt.Errorf("raft peer %d has no replication address", h.from)
		}
		if err == nil {
			n.log.Info("joining member: copying a member's store", "source", h.repl)
			err = n.cfg.FetchSnapshot(ctx, h.repl, 0)
		}
		cancel()
		if err == nil {
			mSnapshots.WithLabelValues(n.cfg.Database, "received").Inc()
			n.log.Info("joining member: store copied", "store_index", n.st.AppliedIndex(), "raft_index", n.st.RaftApplied())
			return true
		}
		mSnapshots.WithLabelValues(n.cfg.Database, "receive_failed").Inc()
		n.log.Warn("joining member: cannot copy a member's store yet", "err", err)
		select {
		case <-n.quit:
			return false
		case <-time.After(pause):
		}
	}
}

// run is the member's one goroutine: it ticks Raft, feeds it messages and
// proposals, and handles every Ready (persist, send, apply, advance).
func (n *Node) run() {
	defer close(n.done)
	if n.joinFetch && !n.fetchForJoin() {
		n.failWaiters()
		return
	}
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-n.quit:
			n.failWaiters()
			return
		case <-t.C:
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
	mPersistSeconds.WithLabelValues(n.cfg.Database).Observe(time.Since(t0).Seconds())
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
		mLeaderChanges.WithLabelValues(n.cfg.Database).Inc()
		n.log.Info("raft leader changed", "leader", ss.Lead, "state", ss.RaftState.String())
		n.mu.Lock()
		n.mu.status.Leader = ss.Lead
		close(n.mu.leaderCh)
		n.mu.leaderCh = make(chan struct{})
		n.mu.Unlock()
	}
	if ss.RaftState == raft.StateLeader {
		mIsLeader.WithLabelValues(n.cfg.Database).Set(1)
	} else {
		mIsLeader.WithLabelValues(n.cfg.Database).Set(0)
	}
}

// apply applies committed entries to the store in one durable commit,
// retrying while the store cannot commit (a full disk, say), and answers
// the writes waiting here. It returns false if the node is stopping.
func (n *Node) apply(ents []*pb.Entry) bool {
	b := decodeEntries(ents)
	for _, bad := range b.bad {
		mMessageErrors.WithLabelValues(n.cfg.Database, kindCommand).Inc()
		n.log.Error("committed raft entry does not decode; skipped by every member", "err", bad)
	}
	// Membership changes touch no store state (their commands only move
	// the store's Raft index), so they are applied to Raft first.
	for _, cc := range b.confs {
		n.applyConfChange(cc)
	}
	cmds, ids := b.cmds, b.ids
	t0 := time.Now()
	var res []store.RaftResult
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		var err error
		if res, err = n.st.ApplyRaft(context.Background(), cmds); err == nil {
			break
		}
		n.log.Error("cannot apply committed raft entries to the store; retrying", "first", cmds[0].RaftIndex, "err", err)
		select {
		case <-n.quit:
			return false
		case <-time.After(pause):
		}
	}
	mApplySeconds.WithLabelValues(n.cfg.Database).Observe(time.Since(t0).Seconds())
	if n.log.Enabled(context.Background(), slog.LevelDebug) {
		var changed, dup, skipped, failed int
		for _, r := range res {
			switch {
			case errors.Is(r.Err, store.ErrRaftApplied):
				skipped++
			case r.Err != nil:
				failed++
			case r.Res.Duplicate:
				dup++
			case r.Res.Changed:
				changed++
			}
		}
		n.log.Debug("raft entries applied", "first", cmds[0].RaftIndex, "last", cmds[len(cmds)-1].RaftIndex, "changed", changed, "dup", dup, "skipped", skipped, "failed", failed, "store", n.st.AppliedIndex(), "raft", n.st.RaftApplied())
	}
	n.mu.Lock()
	for i, id := range ids {
		if id == ([16]byte{}) {
			continue
		}
		if w, ok := n.mu.waiters[id]; ok {
			delete(n.mu.waiters, id)
			r := res[i]
			if errors.Is(r.Err, store.ErrRaftApplied) {
				// Applied with a checkpoint this member installed: its
				// outcome is not known here.
				r.Err = fmt.Errorf("raft write applied through a snapshot; outcome unknown here: %w", context.DeadlineExceeded)
			}
			w <- r
		}
	}
	n.mu.Unlock()
	return true
}

// decoded is what a run of committed entries asks of a member: one store
// command per entry (empty for entries that change no data), the proposal
// id of each (zero if none), the membership changes in order, and the
// entries that did not decode.
type decoded struct {
	cmds  []store.RaftCommand
	ids   [][16]byte
	confs []pb.ConfChangeI
	bad   []error
}

// decodeEntries turns committed entries into store commands and
// membership changes. Pure: every member decodes the same bytes alike.
func decodeEntries(ents []*pb.Entry) decoded {
	d := decoded{cmds: make([]store.RaftCommand, 0, len(ents)), ids: make([][16]byte, 0, len(ents))}
	for _, e := range ents {
		rc := store.RaftCommand{RaftIndex: e.GetIndex()}
		var id [16]byte
		var err error
		switch e.GetType() {
		case pb.EntryType_EntryNormal:
			if len(e.GetData()) == 0 {
				break // a new leader's empty entry
			}
			var c command
			if c, err = decodeCommand(e.GetData()); err == nil {
				rc.Time, rc.Heartbeat, rc.Batch, id = c.time, c.heartbeat, c.batch, c.id
			}
		case pb.EntryType_EntryConfChange:
			cc := &pb.ConfChange{}
			if err = proto.Unmarshal(e.GetData(), cc); err == nil {
				d.confs = append(d.confs, cc)
			}
		case pb.EntryType_EntryConfChangeV2:
			cc := &pb.ConfChangeV2{}
			if err = proto.Unmarshal(e.GetData(), cc); err == nil {
				d.confs = append(d.confs, cc)
			}
		}
		if err != nil {
			d.bad = append(d.bad, fmt.Errorf("entry %d: %w", e.GetIndex(), err))
		}
		d.cmds = append(d.cmds, rc)
		d.ids = append(d.ids, id)
	}
	return d
}

// applyConfChange applies a committed membership change and updates the
// transport: an added member's Raft address is the change's context.
func (n *Node) applyConfChange(cci pb.ConfChangeI) {
	n.confState = n.rn.ApplyConfChange(cci)
	cc, ok := cci.AsV1()
	if !ok {
		return // V2 changes are not proposed by qs; raft applied it
	}
	id, addr := cc.GetNodeId(), string(cc.GetContext())
	switch cc.GetType() {
	case pb.ConfChangeType_ConfChangeAddNode, pb.ConfChangeType_ConfChangeAddLearnerNode:
		if addr != "" {
			n.mu.Lock()
			n.mu.members[id] = addr
			n.mu.Unlock()
			n.tr.setPeer(id, addr)
		}
		n.log.Info("raft member added", "id", id, "addr", addr)
	case pb.ConfChangeType_ConfChangeRemoveNode:
		n.mu.Lock()
		delete(n.mu.members, id)
		n.mu.Unlock()
		n.tr.removePeer(id)
		n.log.Info("raft member removed", "id", id)
	}
}

// snapData is the Data of a Raft snapshot: the store's position at the
// snapshot's Raft index, where to fetch it, and the members' addresses.
type snapData struct {
	StoreIndex uint64            `json:"store_index"`
	Repl       string            `json:"repl"`
	Members    map[uint64]string `json:"members"`
}

func decodeSnapData(b []byte) (snapData, error) {
	var d snapData
	if len(b) == 0 {
		return d, errors.New("empty")
	}
	err := json.Unmarshal(b, &d)
	return d, err
}

// snapshotBytes also triggers a compaction: the Raft log is held in memory,
// and a few thousand large entries would not fit.
const snapshotBytes = 256 << 20

// maybeCompact records a snapshot and compacts the log once enough entries
// were applied since the last one. The snapshot's data is small: the
// store is the state, and a member that needs it fetches a checkpoint of
// it over replication (installSnapshot).
func (n *Node) maybeCompact() {
	applied := n.st.RaftApplied()
	bySize := n.logBytes >= snapshotBytes && applied > n.lastSnapIndex
	if applied < n.lastSnapIndex+n.cfg.SnapshotEntries && !bySize {
		return
	}
	last, _ := n.disk.mem.LastIndex()
	if applied > last {
		return // the store is ahead of the log (installed a checkpoint)
	}
	n.mu.Lock()
	d := snapData{StoreIndex: n.st.AppliedIndex(), Repl: n.cfg.ReplAddr, Members: maps(n.mu.members)}
	n.mu.Unlock()
	data, _ := json.Marshal(d)
	keepFrom := uint64(1)
	switch {
	case bySize:
		keepFrom = applied // large entries: keep none in memory
	case applied > n.cfg.CatchUpEntries:
		keepFrom = applied - n.cfg.CatchUpEntries
	}
	if first, _ := n.disk.mem.FirstIndex(); keepFrom < first {
		keepFrom = first
	}
	// The store applies without fsync (the Raft log holds the entries):
	// make what it applied durable before the log forgets them.
	if err := n.st.SyncRaft(); err != nil {
		n.log.Warn("raft log compaction skipped: cannot sync the store", "err", err)
		return
	}
	if err := n.disk.compact(applied, n.confState, data, keepFrom); err != nil {
		n.log.Warn("raft log compaction failed", "index", applied, "err", err)
		return
	}
	n.lastSnapIndex = applied
	n.logBytes = 0
	mSnapshots.WithLabelValues(n.cfg.Database, "made").Inc()
	n.log.Info("raft log compacted", "snapshot_index", applied, "store_index", d.StoreIndex, "kept_from", keepFrom)
}

func maps(m map[uint64]string) map[uint64]string {
	out := make(map[uint64]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// installSnapshot brings the store up to a snapshot the leader sent: the
// store must have applied at least the snapshot's Raft index before the
// Raft state moves past it. It fetches a checkpoint of a member's store
// over replication (the leader's, or the snapshot maker's) until the
// store is there. It blocks the member meanwhile; it returns an error only
// when the node stops.
func (n *Node) installSnapshot(snap *pb.Snapshot) error {
	idx := snap.GetMetadata().GetIndex()
	d, err := decodeSnapData(snap.GetData())
	if err != nil {
		n.log.Error("raft snapshot data does not decode", "index", idx, "err", err)
	}
	for id, a := range d.Members {
		n.mu.Lock()
		n.mu.members[id] = a
		n.mu.Unlock()
		n.tr.setPeer(id, a)
	}
	minIndex := d.StoreIndex
	for attempt := 0; n.st.RaftApplied() < idx; attempt++ {
		srcs := []string{}
		if a := n.tr.replAddr(n.lead); a != "" {
			srcs = append(srcs, a)
		}
		if d.Repl != "" && !slices.Contains(srcs, d.Repl) {
			srcs = append(srcs, d.Repl)
		}
		if len(srcs) == 0 {
			n.log.Error("raft snapshot names no member to fetch it from; waiting", "index", idx)
		}
		for _, src := range srcs {
			n.log.Info("store behind the raft snapshot: fetching a checkpoint", "snapshot_index", idx, "store_raft_index", n.st.RaftApplied(), "source", src, "min_store_index", minIndex)
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-n.quit:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := n.cfg.FetchSnapshot(ctx, src, minIndex)
			cancel()
			if err != nil {
				mSnapshots.WithLabelValues(n.cfg.Database, "receive_failed").Inc()
				n.log.Warn("fetching the snapshot failed", "source", src, "err", err)
				continue
			}
			mSnapshots.WithLabelValues(n.cfg.Database, "received").Inc()
			if n.st.RaftApplied() >= idx {
				break
			}
			// An older checkpoint (reused by the source): ask for a newer one.
			minIndex = max(minIndex, n.st.AppliedIndex()+1)
		}
		if n.st.RaftApplied() >= idx {
			break
		}
		select {
		case <-n.quit:
			return ErrStopped
		case <-time.After(time.Second):
		}
	}
	n.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
	n.lastSnapIndex = idx
	n.log.Info("raft snapshot installed", "snapshot_index", idx, "store_index", n.st.AppliedIndex(), "store_raft_index", n.st.RaftApplied())
	return nil
}

// maybeSyncStore makes the store's applied commands durable once a second
// (one fsync), bounding what a restart applies again from the Raft log.
func (n *Node) maybeSyncStore() {
	if time.Since(n.lastSync) < storeSyncInterval || n.st.RaftApplied() == n.syncedRaft {
		return
	}
	n.lastSync = time.Now()
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
	now := time.Now()
	if now.Sub(n.st.AppliedTime()) < hb || now.Sub(n.lastHeartbeat) < hb {
		return
	}
	n.lastHeartbeat = now
	c := command{time: now.UnixNano(), heartbeat: true}
	rand.Read(c.id[:])
	if err := n.rn.Propose(c.encode()); err != nil {
		n.log.Debug("heartbeat not proposed", "err", err)
	}
}

func (n *Node) updateStatus() {
	bs := n.rn.BasicStatus()
	var voters []uint64
	if n.confState != nil {
		voters = n.confState.GetVoters()
	}
	n.mu.Lock()
	members := map[uint64]string{}
	for _, id := range voters {
		members[id] = n.mu.members[id]
	}
	n.mu.status = Status{NodeID: n.cfg.NodeID, Leader: bs.Lead, State: bs.RaftState.String(),
		Term: bs.HardState.GetTerm(), Commit: bs.HardState.GetCommit(), Applied: n.st.RaftApplied(), Members: members}
	n.mu.Unlock()
	db := n.cfg.Database
	mTerm.WithLabelValues(db).Set(float64(bs.HardState.GetTerm()))
	mCommit.WithLabelValues(db).Set(float64(bs.HardState.GetCommit()))
	mApplied.WithLabelValues(db).Set(float64(n.st.RaftApplied()))
	mApplyLag.WithLabelValues(db).Set(float64(bs.HardState.GetCommit()) - float64(min(n.st.RaftApplied(), bs.HardState.GetCommit())))
	first, _ := n.disk.mem.FirstIndex()
	last, _ := n.disk.mem.LastIndex()
	mLogEntries.WithLabelValues(db).Set(float64(last + 1 - first))
	mStorageBytes.WithLabelValues(db).Set(float64(n.disk.sizeBytes()))
}

// Status returns the member's view of the cluster.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.mu.status
	s.Members = maps(s.Members)
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

// onLoop runs f on the loop goroutine and waits for it.
func (n *Node) onLoop(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case n.props <- func() { f(); close(done) }:
	case <-n.quit:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-n.done:
		return ErrStopped
	}
}

// waitLeader waits until a leader is known.
func (n *Node) waitLeader(ctx context.Context) (uint64, error) {
	for {
		n.mu.Lock()
		lead, ch := n.mu.status.Leader, n.mu.leaderCh
		n.mu.Unlock()
		if lead != 0 {
			return lead, nil
		}
		select {
		case <-ch:
		case <-time.After(n.cfg.TickInterval):
			n.updateStatusFromLoop(ctx)
		case <-ctx.Done():
			return 0, ErrNoLeader
		case <-n.quit:
			return 0, ErrStopped
		}
	}
}

func (n *Node) updateStatusFromLoop(ctx context.Context) {
	n.onLoop(ctx, n.updateStatus)
}

// Write proposes b and returns its outcome once this member's store has
// applied it: the write is then durable here and committed by a quorum.
// A follower forwards the proposal to the leader. The error wraps
// store.ErrUnavailable when no leader was found (nothing proposed), or
// context.DeadlineExceeded when the outcome is unknown (the write may
// still commit: retry with the same batch ID).
func (n *Node) Write(ctx context.Context, b store.Batch) (store.WriteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ProposalTimeout)
	defer cancel()
	c := command{batch: b}
	rand.Read(c.id[:])
	w := make(chan store.RaftResult, 1)
	n.mu.Lock()
	n.mu.waiters[c.id] = w
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.mu.waiters, c.id)
		n.mu.Unlock()
	}()
	db := n.cfg.Database
	proposed := false // the current attempt is in Raft's hands
	sent := false     // some attempt was: a failure now leaves the outcome unknown
	unknown := func(why error) (store.WriteResult, error) {
		mProposals.WithLabelValues(db, "timeout").Inc()
		return store.WriteResult{}, fmt.Errorf("raft write not applied within %v (%v; it may still commit): %w", n.cfg.ProposalTimeout, why, context.DeadlineExceeded)
	}
	for {
		if !proposed {
			lead, err := n.waitLeader(ctx)
			if err != nil && sent {
				return unknown(err)
			}
			if err != nil {
				mProposals.WithLabelValues(db, "failed").Inc()
				return store.WriteResult{}, err
			}
			c.time = time.Now().UnixNano()
			data := c.encode()
			var perr error
			if err := n.onLoop(ctx, func() { perr = n.rn.Propose(data) }); err != nil {
				mProposals.WithLabelValues(db, "failed").Inc()
				return store.WriteResult{}, err
			}
			if errors.Is(perr, raft.ErrProposalDropped) {
				// Not appended anywhere: safe to try again shortly.
				select {
				case <-time.After(n.cfg.TickInterval):
					continue
				case <-ctx.Done():
					if sent {
						return unknown(perr)
					}
					mProposals.WithLabelValues(db, "failed").Inc()
					return store.WriteResult{}, fmt.Errorf("%w: proposal dropped (leader changing)", ErrNoLeader)
				}
			}
			if perr != nil && sent {
				return unknown(perr)
			}
			if perr != nil {
				mProposals.WithLabelValues(db, "failed").Inc()
				return store.WriteResult{}, fmt.Errorf("%w: propose: %v", store.ErrUnavailable, perr)
			}
			if lead != n.cfg.NodeID {
				mForwarded.WithLabelValues(db).Inc()
			}
			proposed, sent = true, true
		}
		n.mu.Lock()
		leaderCh := n.mu.leaderCh
		n.mu.Unlock()
		select {
		case r := <-w:
			if r.Err != nil {
				mProposals.WithLabelValues(db, "failed").Inc()
			} else {
				mProposals.WithLabelValues(db, "ok").Inc()
			}
			return r.Res, r.Err
		case <-leaderCh:
			// The proposal may have been lost with the old leader. A batch
			// with an ID is proposed again: the store applies it once.
			if len(b.ID) > 0 {
				proposed = false
			}
		case <-ctx.Done():
			return unknown(ctx.Err())
		case <-n.quit:
			return store.WriteResult{}, ErrStopped
		}
	}
}

// AddMember adds a member (its id and Raft address) and waits until the
// change is applied here.
func (n *Node) AddMember(ctx context.Context, id uint64, addr string) error {
	if id == 0 || addr == "" {
		return fmt.Errorf("%w: member id and address required", store.ErrInvalid)
	}
	cc := &pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: new(id), Context: []byte(addr)}
	return n.changeMembers(ctx, cc, func(s Status) bool { _, ok := s.Members[id]; return ok })
}

// RemoveMember removes a member and waits until the change is applied here.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: member id required", store.ErrInvalid)
	}
	if _, ok := n.Status().Members[id]; !ok {
		return fmt.Errorf("%w: %d is not a member", store.ErrInvalid, id)
	}
	cc := &pb.ConfChange{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(id)}
	return n.changeMembers(ctx, cc, func(s Status) bool { _, ok := s.Members[id]; return !ok })
}

func (n *Node) changeMembers(ctx context.Context, cc *pb.ConfChange, done func(Status) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*n.cfg.ProposalTimeout)
	defer cancel()
	for {
		if done(n.Status()) {
			return nil
		}
		if _, err := n.waitLeader(ctx); err != nil {
			return err
		}
		var perr error
		if err := n.onLoop(ctx, func() { perr = n.rn.ProposeConfChange(cc) }); err != nil {
			return err
		}
		if perr != nil && !errors.Is(perr, raft.ErrProposalDropped) {
			return fmt.Errorf("%w: %v", store.ErrInvalid, perr)
		}
		// A change proposed while another is pending is dropped by the
		// leader; poll and propose again until it shows.
		for i := 0; i < 20; i++ {
			select {
			case <-ctx.Done():
				return fmt.Errorf("membership change not applied: %w", ctx.Err())
			case <-time.After(n.cfg.TickInterval):
			}
			if done(n.Status()) {
				return nil
			}
		}
	}
}

// raftLogger routes the raft library's messages to slog.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...any) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Error(v ...any)                 { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any) { r.l.Error(fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...any)                  { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)  { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)               { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.l.Warn(fmt.Sprintf(format, v...))
}
func (r raftLogger) Fatal(v ...any)                 { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...any) { r.Fatal(fmt.Sprintf(format, v...)) }
func (r raftLogger) Panic(v ...any)                 { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any) { r.Panic(fmt.Sprintf(format, v...)) }
