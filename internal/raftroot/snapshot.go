package raftroot

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

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
	d := snapData{StoreIndex: n.st.AppliedIndex(), Repl: n.cfg.ReplAddr, Members: maps.Clone(n.mu.members)}
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
	n.cfg.Metrics.snapshots.WithLabelValues(n.cfg.Database, "made").Inc()
	n.log.Info("raft log compacted", "snapshot_index", applied, "store_index", d.StoreIndex, "kept_from", keepFrom)
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
				n.cfg.Metrics.snapshots.WithLabelValues(n.cfg.Database, "receive_failed").Inc()
				n.log.Warn("fetching the snapshot failed", "source", src, "err", err)
				continue
			}
			n.cfg.Metrics.snapshots.WithLabelValues(n.cfg.Database, "received").Inc()
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
		case <-n.clock.After(time.Second):
		}
	}
	n.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*pb.ConfState)
	n.lastSnapIndex = idx
	n.log.Info("raft snapshot installed", "snapshot_index", idx, "store_index", n.st.AppliedIndex(), "store_raft_index", n.st.RaftApplied())
	return nil
}
