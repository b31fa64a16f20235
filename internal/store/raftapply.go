package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Applying a replicated root's Raft log (internal/raftroot). Every member
// of an HA root feeds the committed Raft commands, in order, to ApplyRaft.
// The committer evaluates them exactly as it evaluates Write: conditions,
// no-op elimination, batch ids, index and hash. Evaluation depends only on
// the store's state and the command (the entry time is the proposer's,
// clamped so the log clock never goes back), so every member that applies
// the same commands from the same state writes byte-identical entries with
// the same indexes and hashes.
//
// The Raft index of the last applied command is kept in metaRaft, in the
// same durable batch as what the command changed, so after a crash a member
// resumes exactly after the last applied command: commands at or below it
// are skipped, never applied twice, and a command that changed nothing (a
// failed condition, a no-op, an empty leader entry) still advances it.
//
//	mraft → raft index (8 BE)

var metaRaft = []byte("mraft")

// A group of Raft commands only is committed without an fsync: the Raft
// log, fsynced before its entries are applied, holds them durably, and the
// store's Raft index moves in the same batch as their effects, so after a
// crash the member applies again, exactly once, what the store lost. The
// member calls SyncRaft before it compacts its Raft log past what the
// store applied.

// writeOptions is the durability of the group's batch.
func (c *committer) writeOptions(group []*request) *pebble.WriteOptions {
	if needsSync(group) && !c.g.appended && !c.rp.active() {
		return pebble.Sync
	}
	// A group whose block went to a synced log segment, or that is
	// replayed from one, needs no Pebble fsync: a replay at open restores
	// what Pebble loses (segment.go). A durable group with no block (a
	// Raft reset, the outcome of an idempotent no-op) has nothing in a
	// segment: Pebble's sync is its durability.
	return pebble.NoSync
}

// needsSync reports whether the group must be durable when committed.
func needsSync(group []*request) bool {
	for _, r := range group {
		// A proxy's cache changes need no fsync either (see proxy.go).
		if r.kind != reqRaft && r.kind != reqCache {
			return true
		}
	}
	return false
}

// SyncRaft makes every Raft command applied so far durable (one WAL fsync).
func (s *Store) SyncRaft() error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	return s.engineWrite(func() error { return s.db.LogData(nil, pebble.Sync) })
}

// ErrRaftApplied is the result of a command skipped because its Raft index
// was already applied (after a restart or a snapshot install).
var ErrRaftApplied = errors.New("qs: raft command already applied")

// errRaftOnly: a store that applies a Raft log takes writes only from it:
// a direct write would give this member entries the others lack.
var errRaftOnly = fmt.Errorf("%w: the store applies a raft log; write through the raft member", ErrNotRoot)

// RaftCommand is one committed command of a replicated root's Raft log.
type RaftCommand struct {
	// RaftIndex is the command's index in the Raft log; it must grow.
	RaftIndex uint64
	// Time is the entry time chosen by the proposer (Unix ns).
	Time int64
	// Heartbeat writes a heartbeat entry; otherwise Batch is evaluated as
	// a Write. A command with neither only advances the Raft index.
	Heartbeat bool
	Batch     Batch
}

// RaftResult is the outcome of one command: its WriteResult, or the error
// the same Write would have returned (a failed condition, a limit), or
// ErrRaftApplied.
type RaftResult struct {
	Res WriteResult
	Err error
}

// ApplyRaft applies commands as one durable commit and returns one result
// per command. An error is returned only when nothing was applied (a
// storage failure, a full disk, a closed store); the caller retries the
// same commands later.
func (s *Store) ApplyRaft(ctx context.Context, cmds []RaftCommand) ([]RaftResult, error) {
	size := 0
	for i := range cmds {
		for _, op := range cmds[i].Batch.Ops {
			size += len(op.Key) + len(op.Value)
		}
	}
	r := &request{kind: reqRaft, cmds: cmds, size: size, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return nil, err
	}
	return r.results, nil
}

// ResetRaft sets the applied Raft index back to 0, durably: the store
// becomes the starting state of a new Raft cluster (a one-member cluster
// bootstrapped on an existing database, see internal/raftroot).
func (s *Store) ResetRaft(ctx context.Context) error {
	r := &request{kind: reqRaftReset, done: make(chan struct{})}
	return s.submit(ctx, r)
}

// RaftApplied is the Raft index of the last command applied durably (0 if
// the store never applied a Raft log).
func (s *Store) RaftApplied() uint64 { return s.raftApplied.Load() }

func (s *Store) readRaftApplied() (uint64, error) {
	v, err := s.getMeta(metaRaft)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read raft index: %w", err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: raft index record of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// prepareRaft evaluates the commands of r in order, at the times their
// proposer chose. Like evalWrite it returns only what aborts the group: a
// storage failure, or damage a command's outcome depends on.
func (c *committer) prepareRaft(r *request) error {
	r.results = make([]RaftResult, len(r.cmds))
	for i := range r.cmds {
		cmd := &r.cmds[i]
		res := &r.results[i]
		if cmd.RaftIndex <= c.raftIndex {
			res.Err = ErrRaftApplied
			continue
		}
		if cmd.Heartbeat || len(cmd.Batch.Ops) > 0 {
			w := request{kind: reqWrite, batch: cmd.Batch}
			if err := c.evalWrite(&w, command{heartbeat: cmd.Heartbeat, batch: cmd.Batch, time: cmd.Time, proposed: true}, memberRole{}); err != nil {
				return err
			}
			res.Res, res.Err = w.res, w.err
		}
		c.raftIndex = cmd.RaftIndex
	}
	return nil
}

func encodeRaftIndex(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
