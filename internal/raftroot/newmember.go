package raftroot

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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
		h, addr, err := askPeers(ctx, peers, n.cfg.Dial)
		switch {
		case err != nil:
		case h.repl == "":
			err = fmt.Errorf("raft peer %d has no replication address", h.from)
		case !sameHost(h.repl, addr):
			// Snapshot sources come from the membership: a peer may
			// name its replication port, not another host.
			err = fmt.Errorf("raft peer %d at %s names a replication address on another host (%s)", h.from, addr, h.repl)
		}
		if err == nil {
			n.log.Info("joining member: copying a member's store", "source", h.repl)
			err = n.cfg.FetchSnapshot(ctx, h.repl, 0)
		}
		cancel()
		if err == nil {
			n.cfg.Metrics.snapshots.WithLabelValues(n.cfg.Database, "received").Inc()
			n.log.Info("joining member: store copied", "store_index", n.st.AppliedIndex(), "raft_index", n.st.RaftApplied())
			return true
		}
		n.cfg.Metrics.snapshots.WithLabelValues(n.cfg.Database, "receive_failed").Inc()
		n.log.Warn("joining member: cannot copy a member's store yet", "err", err)
		select {
		case <-n.quit:
			return false
		case <-n.clock.After(pause):
		}
	}
}
