package raftroot

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/store"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// onLoop runs f on the loop goroutine and waits for it, at most until ctx
// ends: the loop may be busy for long (applying, fetching a snapshot,
// retrying a full disk) or stopped after a storage failure. f is not run
// once ctx has ended; an error says f did not run, except ctx's error,
// which leaves unknown whether it did.
func (n *Node) onLoop(ctx context.Context, f func()) error {
	done := make(chan struct{})
	ran := false
	g := func() {
		if ctx.Err() == nil {
			f()
			ran = true
		}
		close(done)
	}
	finished := func() error {
		if !ran {
			return ctx.Err()
		}
		return nil
	}
	select {
	case n.props <- g:
	case <-n.quit:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return finished()
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		select {
		case <-done: // f ran before the loop ended
			return finished()
		default:
			return ErrStopped
		}
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
		case <-n.clock.After(n.cfg.TickInterval):
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
// store.ErrDiskFull when this member's disk is below its free-space
// reserve (nothing proposed), store.ErrUnavailable when no leader was found or the member stopped
// before proposing (nothing proposed), or context.DeadlineExceeded when the
// outcome is unknown (the write may still commit: retry with the same
// batch ID): the timeout passed, the member stopped after proposing, or a
// copy proposed again after a leader change may still meet a condition
// the first copy failed.
func (n *Node) Write(ctx context.Context, b store.Batch) (store.WriteResult, error) {
	// The limits are checked here, by the member that takes the write:
	// members apply a committed command whatever their own limits.
	if err := n.st.ValidateBatch(b); err != nil {
		return n.answer(classify(evInvalid, 0, err), store.WriteResult{}, err)
	}
	// A write this member's store could not apply for lack of disk space
	// is refused before it is proposed: the answer is "disk full" at once,
	// not a timeout after the member retried its apply until then.
	if err := n.st.CheckSpace(); errors.Is(err, store.ErrDiskFull) {
		return n.answer(classify(evDiskFull, 0, err), store.WriteResult{}, err)
	}
	ctx, cancel := withTimeout(ctx, n.clock, n.cfg.ProposalTimeout)
	defer cancel()
	c := command{batch: b}
	rand.Read(c.id[:])
	if len(c.batch.ID) == 0 {
		// A write without its producer's ID (memcached, HTTP without an
		// Idempotency-Key) gets one here, so that it too can be proposed
		// again when the leader changes: the store applies it once.
		c.batch.ID = append([]byte("qs-raft:"), c.id[:]...)
	}
	w := make(chan store.RaftResult, 1)
	n.mu.Lock()
	n.mu.waiters[c.id] = w
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.mu.waiters, c.id)
		n.mu.Unlock()
	}()
	copies := 0 // copies in Raft's hands: each may commit
	for {
		lead, err := n.waitLeader(ctx)
		if err != nil {
			return n.answer(classify(evNoLeader, copies, err), store.WriteResult{}, err)
		}
		// The leader change to watch for is any after this point: a
		// channel read after proposing would miss a change that happened
		// while the proposal was on its way, and the write would wait for
		// its timeout instead of being proposed again.
		n.mu.Lock()
		leaderCh := n.mu.leaderCh
		n.mu.Unlock()
		c.time = n.proposalTime()
		data := c.encode()
		var perr error
		if err := n.onLoop(ctx, func() { perr = n.rn.Propose(data) }); err != nil {
			ev := evNotTaken
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				ev = evMaybeTaken
			}
			return n.answer(classify(ev, copies, err), store.WriteResult{}, err)
		}
		if errors.Is(perr, raft.ErrProposalDropped) {
			// Not appended anywhere: safe to try again shortly.
			select {
			case <-n.clock.After(n.cfg.TickInterval):
				continue
			case <-ctx.Done():
				return n.answer(classify(evDropped, copies, perr), store.WriteResult{},
					fmt.Errorf("%w: proposal dropped (leader changing)", ErrNoLeader))
			}
		}
		if perr != nil {
			return n.answer(classify(evProposeFailed, copies, perr), store.WriteResult{},
				fmt.Errorf("%w: propose: %v", store.ErrUnavailable, perr))
		}
		if lead != n.cfg.NodeID {
			n.cfg.Metrics.forwarded.WithLabelValues(n.cfg.Database).Inc()
		}
		copies++
		select {
		case r := <-w:
			return n.answer(classify(evResult, copies, r.Err), r.Res, r.Err)
		case <-leaderCh:
			// The proposal may have been lost with the old leader: propose
			// it again; its batch ID makes the store apply it once.
			if o := classify(evLeaderChanged, copies, nil); o != outcomeProposeAgain {
				return n.answer(o, store.WriteResult{}, errors.New("raft leader changed"))
			}
		case <-ctx.Done():
			return n.answer(classify(evTimeout, copies, ctx.Err()), store.WriteResult{}, ctx.Err())
		case <-n.quit:
			return n.answer(classify(evStopping, copies, ErrStopped), store.WriteResult{}, ErrStopped)
		}
	}
}

// answer returns a write's answer for its outcome, and counts it.
func (n *Node) answer(o outcome, res store.WriteResult, err error) (store.WriteResult, error) {
	n.cfg.Metrics.proposals.WithLabelValues(n.cfg.Database, o.label()).Inc()
	switch o {
	case outcomeApplied:
		return res, nil
	case outcomeUnknown:
		return store.WriteResult{}, fmt.Errorf("raft write not answered (%v; proposal timeout %v); it may still commit: %w", err, n.cfg.ProposalTimeout, context.DeadlineExceeded)
	case outcomeRefused:
		return res, err
	default: // outcomeUnavailable
		return store.WriteResult{}, err
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
	ctx, cancel := withTimeout(ctx, n.clock, 2*n.cfg.ProposalTimeout)
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
			case <-n.clock.After(n.cfg.TickInterval):
			}
			if done(n.Status()) {
				return nil
			}
		}
	}
}
