package store

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// Evaluation turns a command (a write or a heartbeat, with the time chosen
// for it) into the log entry it appends, against the state the commands
// before it left. It is deterministic by construction: it reads only the
// command, the log format's bounds and the state it is given through
// stateReader, never the store's configured limits, its clock or what it
// does about damage to its own data. Every member of an HA root that
// evaluates the same commands from the same state therefore appends the
// same entries, whatever its configuration, or refuses to go on.
//
// The local checks happen elsewhere: a root's Write and a member's
// ValidateBatch check the configured limits before a write is evaluated
// (or proposed); the commit pipeline supplies the time; a role's
// damagePolicy (roles.go) settles what a damaged stored value means.

// command is what the evaluator turns into an entry.
type command struct {
	// heartbeat appends an entry carrying only the time; otherwise batch
	// is evaluated.
	heartbeat bool
	batch     Batch
	// time is the entry time proposed for the command (Unix ns); the
	// entry gets the last entry's time if it is earlier, so the log's
	// clock never goes back.
	time int64
	// proposed: time comes from another node's clock (a Raft proposal or
	// heartbeat), which may be far ahead; the entry's time is then at
	// most maxProposedClockStep past the last entry's (boundTime). A
	// single root's own times are bounded before (rootClock).
	proposed bool
}

// maxProposedClockStep bounds how far one proposed entry moves the log's
// clock. A proposal dated a day ahead would otherwise move it a day for
// good: batch outcomes would expire at once (a retried write applied
// twice), history would expire, and replica lag would read 0. Heartbeats
// come every second, so an honest log moves far less per entry; after a
// long outage the clock catches up at this rate, expiring things late,
// never early. Part of the log's meaning: the same on every member.
const maxProposedClockStep = int64(30 * time.Second)

// boundTime is the time of the entry of cmd after last: never before
// last's, and for a proposed command at most maxProposedClockStep after it
// (a first entry takes the proposed time). clamped: the proposed time was
// further ahead.
func boundTime(cmd command, last int64) (t int64, clamped bool) {
	t = max(cmd.time, last)
	if cmd.proposed && last > 0 && t-last > maxProposedClockStep {
		return last + maxProposedClockStep, true
	}
	return t, false
}

// keyView is what evaluation knows of a key.
type keyView struct {
	exists bool
	// index is the index of the entry that last wrote the key.
	index uint64
	// attrs are what was stored with its value.
	attrs valueAttrs
	// damaged: the key's stored record fails its checks; it exists, but
	// its index and value are unknown.
	damaged bool
}

// stateReader is the state a command is evaluated against: what the
// entries applied so far (the commands of the same commit included) made
// of the keys and the batch outcomes.
//
// Error contract: an error wrapping ErrCorrupt means the answer depends on
// stored data that fails its checks (damage: the same state, intact,
// would have answered); any other error is a failure to read the storage
// (nothing was decided, the evaluation can be retried).
type stateReader interface {
	// last is the last applied entry.
	last() appliedRecord
	// key returns what is known of key.
	key(key []byte) (keyView, error)
	// sameValue reports whether the existing key's value equals v.
	sameValue(key []byte, v []byte) (bool, error)
	// outcome returns the recorded outcome of the batch ID, if any.
	outcome(id []byte) (batchOutcome, bool, error)
}

// evaluation is the outcome of one command.
type evaluation struct {
	// entry is the entry to append (its hash not yet computed); nil when
	// the command appends nothing.
	entry *wal.Entry
	// res is the command's result; with an entry, its index is the
	// entry's.
	res WriteResult
	// refused is the command's own error (the format's bounds, a failed
	// condition): nothing is appended, nothing recorded.
	refused error
	// noop: every op of the batch was a no-op.
	noop bool
	// time is the command's time on the log's clock: its entry's, and
	// that of its batch outcome.
	time int64
	// clamped: the proposed time was further ahead than the log's clock
	// may move in one entry (boundTime).
	clamped bool
}

// evaluator evaluates commands. Its one setting is part of the log's
// meaning and must be the same on every member of an HA root.
type evaluator struct {
	// idempotencyWindow is how long a batch outcome counts, by the log's
	// clock (ns).
	idempotencyWindow int64
}

// evaluate evaluates cmd against st. A returned error is either damage
// (wrapping ErrCorrupt: the outcome depends on the stored data that is
// damaged) or a storage failure; in both cases nothing was decided.
func (ev evaluator) evaluate(st stateReader, cmd command) (evaluation, error) {
	last := st.last()
	t, clamped := boundTime(cmd, last.time)
	if cmd.heartbeat {
		e := &wal.Entry{Index: last.index + 1, Time: t, Kind: wal.KindHeartbeat}
		return evaluation{entry: e, res: WriteResult{Index: e.Index, Changed: true}, time: t, clamped: clamped}, nil
	}
	b := cmd.batch
	if _, err := validateBatch(b, formatLimits); err != nil {
		return evaluation{refused: err}, nil
	}
	if len(b.ID) > 0 {
		o, seen, err := st.outcome(b.ID)
		if err != nil {
			return evaluation{}, err
		}
		if seen && o.time >= t-ev.idempotencyWindow {
			return evaluation{res: WriteResult{Index: o.index, Changed: o.changed, Duplicate: true}}, nil
		}
	}
	for _, cond := range b.Conds {
		k, err := st.key(cond.Key)
		if err != nil {
			return evaluation{}, err
		}
		if k.damaged {
			return evaluation{}, fmt.Errorf("%w: key %q: stored record is corrupt, so its index is unknown; write it without a condition to repair it", ErrCorrupt, cond.Key)
		}
		var cur uint64
		if k.exists {
			cur = k.index
		}
		if cur != cond.Index {
			return evaluation{refused: fmt.Errorf("%w: key %q is at index %d, not %d", ErrConditionFailed, cond.Key, cur, cond.Index)}, nil
		}
	}
	kept := make([]wal.Op, 0, len(b.Ops))
	// An op is a no-op against the state left by the batch's earlier ops:
	// "set k; del k" must keep the delete even if k did not exist before.
	// A set is a no-op only if it leaves both the value and its
	// attributes (client flags, expiry) as they are.
	var earlier map[string]wal.Op
	for _, op := range b.Ops {
		prev, touched := earlier[string(op.Key)]
		exists := prev.Type == wal.OpSet
		attrs := attrsOf(prev)
		if !touched {
			k, err := st.key(op.Key)
			if err != nil {
				return evaluation{}, err
			}
			exists, attrs = k.exists, k.attrs
		}
		switch {
		case op.Type == wal.OpDelete && !exists:
			continue
		case op.Type == wal.OpSet && exists && attrs != attrsOf(op):
		case op.Type == wal.OpSet && touched && exists:
			if bytes.Equal(prev.Value, op.Value) {
				continue
			}
		case op.Type == wal.OpSet && exists:
			same, err := st.sameValue(op.Key, op.Value)
			if err != nil {
				return evaluation{}, err
			}
			if same {
				continue
			}
		}
		kept = append(kept, op)
		if len(b.Ops) > 1 {
			if earlier == nil {
				earlier = map[string]wal.Op{}
			}
			earlier[string(op.Key)] = op
		}
	}
	if len(kept) == 0 {
		return evaluation{res: WriteResult{Index: last.index}, noop: true, time: t}, nil
	}
	e := &wal.Entry{Index: last.index + 1, Time: t, Kind: wal.KindData, Ops: kept}
	return evaluation{entry: e, res: WriteResult{Index: e.Index, Changed: true}, time: t, clamped: clamped}, nil
}

// isDamage reports whether an evaluation error is damage to the stored
// data rather than a storage failure (stateReader's error contract).
func isDamage(err error) bool { return errors.Is(err, ErrCorrupt) }
