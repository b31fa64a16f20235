package store

import (
	"context"
	"fmt"
	"math"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// Cond is a compare-and-swap condition: the key's index (the index of the
// entry that last wrote it) must equal Index; Index 0 means the key must not
// exist.
type Cond struct {
	Key   []byte
	Index uint64
}

// Batch is one atomic write: all conditions hold and all ops apply, or
// nothing does.
type Batch struct {
	Ops   []wal.Op
	Conds []Cond
	// ID, when set, makes the batch idempotent: a batch with an ID seen in
	// the last IdempotencyWindow is not applied again; it gets the first
	// outcome, with Duplicate set (see idempotency.go).
	ID []byte
}

// WriteResult tells where a write landed. Changed is false when every op
// was a no-op (identical rewrite, delete of a missing key): no entry was
// written and Index is the applied index the write was evaluated against.
type WriteResult struct {
	Index   uint64
	Changed bool
	// Duplicate: the batch's ID was seen before; nothing was applied now
	// and Index and Changed are those of the first attempt.
	Duplicate bool
}

type requestKind uint8

const (
	reqWrite requestKind = iota
	reqApply
	reqHeartbeat
	reqReplace // install the ready snapshot (see snapshot.go)
	reqRaft    // apply committed Raft commands (see raftapply.go)
	reqRaftReset
	reqCache // proxy: admit or evict values (see proxy.go)
	// reqCompact frees the retired blocks of sparse log segments
	// (segstore.go); it runs alone
	reqCompact
)

type request struct {
	kind     requestKind
	batch    Batch
	entries  []wal.Entry
	cmds     []RaftCommand // reqRaft
	results  []RaftResult  // reqRaft
	cache    *cacheChange  // reqCache
	segments []uint64      // reqCompact
	size     int
	res      WriteResult
	err      error
	done     chan struct{}
}

// Write commits b durably as one log entry and returns its index. It is
// for the root only; replicas use Apply. The committer reads b's keys and
// values until the write is done: the caller must not change them before
// Write returns, nor ever if it returns a context error (the write may
// still commit).
func (s *Store) Write(ctx context.Context, b Batch) (WriteResult, error) {
	if s.opts.Proxy != nil {
		return WriteResult{}, fmt.Errorf("%w: database %s is a proxy", ErrNotRoot, s.opts.Name)
	}
	if s.raftApplied.Load() > 0 {
		return WriteResult{}, errRaftOnly
	}
	size, err := s.validate(b)
	if err != nil {
		s.m.writeErrors.WithLabelValues(errorKind(err)).Inc()
		return WriteResult{}, err
	}
	r := &request{kind: reqWrite, batch: b, size: size, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return WriteResult{}, err // r may still be in the committer's hands
	}
	return r.res, nil
}

// Heartbeat writes an entry carrying only the clock, so replicas can
// measure their lag when no data changes.
func (s *Store) Heartbeat(ctx context.Context) (uint64, error) {
	if s.raftApplied.Load() > 0 {
		return 0, errRaftOnly
	}
	r := &request{kind: reqHeartbeat, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return 0, err // r may still be in the committer's hands
	}
	return r.res.Index, nil
}

// Apply appends entries received from another node: they must continue
// the applied log (index and hash chain) and are committed durably as one
// batch. Nothing is applied if any entry does not follow.
func (s *Store) Apply(ctx context.Context, entries []wal.Entry) error {
	if s.raftApplied.Load() > 0 {
		return errRaftOnly
	}
	size := 0
	for i := range entries {
		size += entries[i].BodySize()
	}
	r := &request{kind: reqApply, entries: entries, size: size, done: make(chan struct{})}
	return s.submit(ctx, r)
}

func (s *Store) submit(ctx context.Context, r *request) error {
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: opened read-only", ErrClosed)
	}
	select {
	case s.reqs <- r:
	case <-s.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return r.err
	case <-s.stopped:
		select {
		case <-r.done:
			return r.err
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return fmt.Errorf("%w (the write may still commit)", ctx.Err())
	}
}

// ValidateBatch checks b as Write does (shape and the store's configured
// limits), without writing it. An HA root's member checks a write with it
// before proposing it (see ApplyRaft).
func (s *Store) ValidateBatch(b Batch) error {
	_, err := s.validate(b)
	if err != nil {
		s.m.writeErrors.WithLabelValues(errorKind(err)).Inc()
	}
	return err
}

// batchLimits are the limits a batch is checked against.
type batchLimits struct{ keyBytes, valueBytes, ops, bytes int }

// formatLimits are the log format's own limits: what ApplyRaft checks a
// committed command against, the same on every member whatever its
// configured limits.
var formatLimits = batchLimits{keyBytes: wal.MaxKeyLen, valueBytes: wal.MaxValueLen, ops: wal.MaxOps, bytes: math.MaxInt}

func (s *Store) validate(b Batch) (int, error) {
	return validateBatch(b, batchLimits{keyBytes: s.opts.MaxKeyBytes, valueBytes: s.opts.MaxValueBytes, ops: s.opts.MaxBatchOps, bytes: s.opts.MaxBatchBytes})
}

func validateBatch(b Batch, l batchLimits) (int, error) {
	if len(b.Ops) == 0 {
		return 0, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	if len(b.Ops) > l.ops {
		return 0, fmt.Errorf("%w: %d ops in a batch, limit %d", ErrTooLarge, len(b.Ops), l.ops)
	}
	if len(b.ID) > MaxBatchIDBytes {
		return 0, fmt.Errorf("%w: batch id of %d bytes, limit %d", ErrTooLarge, len(b.ID), MaxBatchIDBytes)
	}
	if len(b.Conds) > l.ops {
		return 0, fmt.Errorf("%w: %d conditions in a batch, limit %d", ErrTooLarge, len(b.Conds), l.ops)
	}
	size := 0
	checkKey := func(k []byte) error {
		if len(k) == 0 {
			return fmt.Errorf("%w: empty key", ErrInvalid)
		}
		if len(k) > l.keyBytes {
			return fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(k), l.keyBytes)
		}
		return nil
	}
	for _, c := range b.Conds {
		if err := checkKey(c.Key); err != nil {
			return 0, err
		}
	}
	for _, op := range b.Ops {
		if err := checkKey(op.Key); err != nil {
			return 0, err
		}
		switch op.Type {
		case wal.OpSet:
			if op.Expires < 0 {
				return 0, fmt.Errorf("%w: expiry %d before 1970", ErrInvalid, op.Expires)
			}
			if len(op.Value) > l.valueBytes {
				return 0, fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, len(op.Value), l.valueBytes)
			}
		case wal.OpDelete:
			if len(op.Value) != 0 {
				return 0, fmt.Errorf("%w: delete with a value", ErrInvalid)
			}
			if op.Flags != 0 || op.Expires != 0 {
				return 0, fmt.Errorf("%w: delete with client flags or an expiry", ErrInvalid)
			}
		default:
			return 0, fmt.Errorf("%w: unknown op type %d", ErrInvalid, op.Type)
		}
		size += len(op.Key) + len(op.Value)
	}
	if size > l.bytes {
		return 0, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrTooLarge, size, l.bytes)
	}
	return size, nil
}
