package raftroot

import (
	"context"
	"errors"

	"github.com/quicksilver-kv/qs/internal/store"
)

// What a write's proposer is told is decided by classify, from what
// happened to the write (a writeEvent) and how many copies of it Raft
// took. The rule behind every case: once a copy may be in the log, only
// the store's result for it may be reported as the write's outcome; every
// other answer is "outcome unknown" (a timeout, HTTP 504: retry with the
// same batch ID, which the store applies once), never "unavailable"
// (HTTP 503, which says nothing was proposed: a retry without a batch ID
// would apply the write twice).

// writeEvent is what happened to a write in Node.Write.
type writeEvent int

const (
	// evInvalid: the proposer's own checks refused the batch (too large,
	// malformed); nothing was proposed.
	evInvalid writeEvent = iota
	// evDiskFull: this member's disk is below its free-space reserve, so
	// its store could not apply the write; nothing was proposed.
	evDiskFull
	// evNoLeader: no leader was known within the proposal timeout, or the
	// member stopped while waiting for one.
	evNoLeader
	// evNotTaken: the member's loop did not take the proposal: it stopped
	// first.
	evNotTaken
	// evMaybeTaken: the proposal timeout passed while handing the proposal
	// to the member's loop (busy applying, fetching a snapshot, retrying a
	// full disk, or stopped after a storage failure): it may have run.
	evMaybeTaken
	// evDropped: Raft dropped the proposal (no leader for a moment) and the
	// proposal timeout passed before another try.
	evDropped
	// evProposeFailed: Raft refused the proposal for another reason.
	evProposeFailed
	// evResult: this member applied a copy; the error is the store's
	// judgement of it (nil: applied).
	evResult
	// evLeaderChanged: the leader changed while a copy was in flight; it
	// may have been lost with the old leader.
	evLeaderChanged
	// evTimeout: the proposal timeout passed (or the caller gave up)
	// while a copy was in flight.
	evTimeout
	// evStopping: the member stopped while a copy was in flight.
	evStopping
)

// outcome is how a write is answered (or that it is proposed again).
type outcome int

const (
	// outcomeApplied: applied; the answer is the store's result.
	outcomeApplied outcome = iota
	// outcomeRefused: the store (or the proposer's checks) refused it,
	// alike on every member; the answer is the refusal (a failed
	// condition, a batch too large).
	outcomeRefused
	// outcomeUnavailable: nothing was proposed; the error wraps
	// store.ErrUnavailable and a retry is safe.
	outcomeUnavailable
	// outcomeUnknown: it may still commit; the error wraps
	// context.DeadlineExceeded.
	outcomeUnknown
	// outcomeProposeAgain: not answered yet; propose the write again.
	outcomeProposeAgain
)

// label is the outcome's value of the "outcome" label of proposals_total.
func (o outcome) label() string {
	switch o {
	case outcomeApplied:
		return "ok"
	case outcomeUnknown:
		return "timeout"
	default:
		return "failed"
	}
}

// classify decides the outcome of a write after ev, when copies copies of
// it were taken by Raft before (for evResult, evLeaderChanged, evTimeout
// and evStopping: including the one in flight). err is the event's error:
// for evResult, the store's result; otherwise it does not change the
// outcome. Pure: a table test covers every case.
func classify(ev writeEvent, copies int, err error) outcome {
	switch ev {
	case evInvalid:
		return outcomeRefused
	case evDiskFull:
		if copies > 0 {
			return outcomeUnknown // an earlier copy may be in the log
		}
		// Refused at once (HTTP 507), not proposed to wait out the
		// proposal timeout while this member retries the apply.
		return outcomeRefused
	case evNoLeader, evNotTaken, evDropped, evProposeFailed:
		if copies > 0 {
			return outcomeUnknown // an earlier copy may be in the log
		}
		return outcomeUnavailable
	case evMaybeTaken, evTimeout, evStopping:
		return outcomeUnknown
	case evLeaderChanged:
		return outcomeProposeAgain
	case evResult:
		switch {
		case err == nil:
			return outcomeApplied
		case errors.Is(err, ErrStopped):
			// Answered because the member stops: the write is in the log
			// and may commit (the leader may have it already).
			return outcomeUnknown
		case errors.Is(err, context.DeadlineExceeded):
			// Applied with a checkpoint this member installed: its
			// outcome is not known here.
			return outcomeUnknown
		case copies > 1 && errors.Is(err, store.ErrConditionFailed):
			// The first copy to commit failed its condition, but a copy
			// proposed again may follow it in the log and meet its
			// condition then (a condition is the only part of a command
			// whose outcome depends on the state; a copy after a success
			// is a duplicate).
			return outcomeUnknown
		default:
			return outcomeRefused
		}
	}
	return outcomeUnknown
}
