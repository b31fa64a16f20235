package store

import (
	"errors"
	"fmt"
)

// The writer's role decides what the evaluator (evaluate.go) is not
// allowed to know: what damage to this store's own data means for a
// command. A root decides alone, so it settles damage locally; a member
// of an HA root must not, because the other members, whose data is
// intact, evaluate the same Raft command from the state the damage hides.

// writerRole is the damage policy of the node that evaluates a command.
type writerRole interface {
	// state is the state the evaluator reads in this role.
	state(c *committer) stateReader
	// damaged settles a command whose evaluation met damage (err wraps
	// ErrCorrupt). It returns nil after refusing the command alone (r.err
	// set), or the error that aborts the whole group.
	damaged(r *request, err error) error
}

// rootRole is a root's policy: a write whose outcome depends on a damaged
// record (a condition on it, the outcome of its batch ID) is refused
// alone, with the damage as its error; a set over a damaged value is a
// change, and writing it repairs the value.
type rootRole struct{}

func (rootRole) state(c *committer) stateReader { return repairingState{groupState{c}} }

func (rootRole) damaged(r *request, err error) error {
	r.err = err
	return nil
}

// memberRole is an HA root member's policy: it stops applying (the error
// aborts the group, which the member retries) until it is repaired from a
// healthy member (operations.md, "Replacing a member"); it never appends
// an entry the others would not.
type memberRole struct{}

func (memberRole) state(c *committer) stateReader { return groupState{c} }

func (memberRole) damaged(_ *request, err error) error {
	return fmt.Errorf("%w; an HA root member cannot apply a command that depends on its own damaged data: replace this member's data from a healthy member", err)
}

// groupState is the committer's state as a stateReader: the store as
// committed, then the group's commands so far.
type groupState struct{ c *committer }

func (g groupState) last() appliedRecord { return g.c.last }

func (g groupState) key(key []byte) (keyView, error) {
	ks, err := g.c.state(key)
	if err != nil {
		return keyView{}, err
	}
	return keyView{exists: ks.exists, index: ks.index, attrs: ks.attrs, damaged: ks.corrupt}, nil
}

func (g groupState) sameValue(key, v []byte) (bool, error) {
	ks, err := g.c.state(key)
	if err != nil {
		return false, err
	}
	return g.c.storedValueIs(key, ks, v)
}

func (g groupState) outcome(id []byte) (batchOutcome, bool, error) {
	return g.c.storedOutcome(id)
}

// repairingState answers that a damaged stored value differs from any
// value written over it, so the write goes ahead and repairs it.
type repairingState struct{ groupState }

func (r repairingState) sameValue(key, v []byte) (bool, error) {
	same, err := r.groupState.sameValue(key, v)
	if errors.Is(err, errValueDamaged) {
		return false, nil
	}
	return same, err
}

// evalWrite evaluates a command in role and appends its entry. It returns
// only what aborts the group (a storage failure, or damage the role does
// not settle alone); the command's own outcome is r.res or r.err.
func (c *committer) evalWrite(r *request, cmd command, role writerRole) error {
	ev, err := c.eval.evaluate(role.state(c), cmd)
	if ev.clamped {
		c.s.m.clockClamped.Inc()
	}
	if err != nil {
		if isDamage(err) {
			return role.damaged(r, err)
		}
		return err
	}
	if ev.refused != nil {
		r.err = ev.refused
		return nil
	}
	if ev.res.Duplicate {
		c.s.m.duplicateWrites.Inc()
		r.res = ev.res
		return nil
	}
	if ev.noop {
		c.s.m.noopWrites.Inc()
	}
	if ev.entry != nil {
		if err := c.append(ev.entry, true); err != nil {
			return err
		}
	}
	r.res = ev.res
	if len(cmd.batch.ID) > 0 {
		c.g.recordBatch(cmd.batch.ID, r.res, ev.time)
	}
	return nil
}
