package raftroot

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
)

// Every case of a write's answer: once a copy may be in the log, only the
// store's result for it is reported; otherwise "outcome unknown", never
// "unavailable" (which says a retry without a batch ID is safe).
func TestClassifyWriteOutcome(t *testing.T) {
	condFailed := fmt.Errorf("%w: k at 3, want 0", store.ErrConditionFailed)
	viaSnapshot := fmt.Errorf("raft write applied through a snapshot; outcome unknown here: %w", context.DeadlineExceeded)
	cases := []struct {
		name   string
		ev     writeEvent
		copies int
		err    error
		want   outcome
	}{
		{"refused by the proposer's limits", evInvalid, 0, store.ErrTooLarge, outcomeRefused},
		{"proposer's disk full, nothing proposed", evDiskFull, 0, store.ErrDiskFull, outcomeRefused},
		{"proposer's disk full, a copy proposed", evDiskFull, 1, store.ErrDiskFull, outcomeUnknown},

		{"no leader, nothing proposed", evNoLeader, 0, ErrNoLeader, outcomeUnavailable},
		{"no leader after a leader change, a copy proposed", evNoLeader, 1, ErrNoLeader, outcomeUnknown},
		{"stopped while waiting for a leader, nothing proposed", evNoLeader, 0, ErrStopped, outcomeUnavailable},
		{"stopped while waiting for a leader, a copy proposed", evNoLeader, 2, ErrStopped, outcomeUnknown},

		{"loop stopped before taking the first copy", evNotTaken, 0, ErrStopped, outcomeUnavailable},
		{"loop stopped before taking a second copy", evNotTaken, 1, ErrStopped, outcomeUnknown},
		// The loop was busy (applying, fetching a snapshot, a full disk,
		// stopped after a storage failure) until the timeout: it may have
		// taken the proposal.
		{"timeout handing the first copy to a busy loop", evMaybeTaken, 0, context.DeadlineExceeded, outcomeUnknown},
		{"timeout handing a second copy to a busy loop", evMaybeTaken, 1, context.DeadlineExceeded, outcomeUnknown},

		{"dropped by raft until the timeout, nothing proposed", evDropped, 0, errors.New("raft proposal dropped"), outcomeUnavailable},
		{"dropped by raft until the timeout, a copy proposed", evDropped, 1, errors.New("raft proposal dropped"), outcomeUnknown},
		{"refused by raft, nothing proposed", evProposeFailed, 0, errors.New("raft: stopped"), outcomeUnavailable},
		{"refused by raft, a copy proposed", evProposeFailed, 1, errors.New("raft: stopped"), outcomeUnknown},

		{"applied", evResult, 1, nil, outcomeApplied},
		{"applied, proposed twice", evResult, 2, nil, outcomeApplied},
		{"condition failed, proposed once", evResult, 1, condFailed, outcomeRefused},
		// A second copy may follow the first in the log and meet its
		// condition once a later write made it true.
		{"condition failed, proposed again after a leader change", evResult, 2, condFailed, outcomeUnknown},
		{"refused by the store, proposed twice", evResult, 2, store.ErrInvalid, outcomeRefused},
		// The member stops with the write in its log: it may commit.
		{"answered because the member stops", evResult, 1, ErrStopped, outcomeUnknown},
		{"applied with a checkpoint installed here", evResult, 1, viaSnapshot, outcomeUnknown},

		{"leader changed with a copy in flight", evLeaderChanged, 1, nil, outcomeProposeAgain},
		{"leader changed again", evLeaderChanged, 3, nil, outcomeProposeAgain},
		{"timeout with a copy in flight", evTimeout, 1, context.DeadlineExceeded, outcomeUnknown},
		{"caller gave up with a copy in flight", evTimeout, 1, context.Canceled, outcomeUnknown},
		{"member stops with a copy in flight", evStopping, 1, ErrStopped, outcomeUnknown},
	}
	for _, tc := range cases {
		if got := classify(tc.ev, tc.copies, tc.err); got != tc.want {
			t.Errorf("%s: classify(%d, %d, %v) = %d, want %d", tc.name, tc.ev, tc.copies, tc.err, got, tc.want)
		}
	}
}

// An outcome's error says what a client may do: retry freely
// (ErrUnavailable), retry with the same batch ID (a timeout), or not at all
// (the store's refusal); and each outcome is counted under its label.
func TestWriteAnswerErrors(t *testing.T) {
	t.Parallel()
	n := &Node{cfg: *(&Config{Database: "answer-test"}).EnsureDefaults()}
	res := store.WriteResult{Index: 7, Changed: true}
	cases := []struct {
		o       outcome
		err     error
		wantErr func(error) bool
		wantRes store.WriteResult
		label   string
	}{
		{outcomeApplied, nil, func(err error) bool { return err == nil }, res, "ok"},
		{outcomeRefused, store.ErrConditionFailed, func(err error) bool { return errors.Is(err, store.ErrConditionFailed) }, res, "failed"},
		{outcomeUnavailable, ErrNoLeader, func(err error) bool {
			return errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded)
		}, store.WriteResult{}, "failed"},
		{outcomeUnknown, ErrStopped, func(err error) bool {
			return errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrUnavailable)
		}, store.WriteResult{}, "timeout"},
	}
	for _, tc := range cases {
		before := counter(t, n.cfg.Metrics.proposals, "answer-test", tc.label)
		got, err := n.answer(tc.o, res, tc.err)
		if !tc.wantErr(err) || got != tc.wantRes {
			t.Errorf("outcome %d: answered %+v, %v", tc.o, got, err)
		}
		if after := counter(t, n.cfg.Metrics.proposals, "answer-test", tc.label); after != before+1 {
			t.Errorf("outcome %d: proposals_total{outcome=%q} %v → %v", tc.o, tc.label, before, after)
		}
	}
}
