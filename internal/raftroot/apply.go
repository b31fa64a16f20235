package raftroot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// apply applies committed entries to the store in one durable commit,
// retrying while the store cannot commit (a full disk, say), and answers
// the writes waiting here. It returns false if the node is stopping.
func (n *Node) apply(ents []*pb.Entry) bool {
	b := decodeEntries(ents)
	for _, bad := range b.bad {
		n.cfg.Metrics.messageErrors.WithLabelValues(n.cfg.Database, kindCommand).Inc()
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
		case <-n.clock.After(pause):
		}
	}
	n.cfg.Metrics.applySeconds.WithLabelValues(n.cfg.Database).Observe(time.Since(t0).Seconds())
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
