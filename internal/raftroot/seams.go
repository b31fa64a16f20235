package raftroot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jonboulle/clockwork"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A member meets the world outside its storage and its store at two seams,
// so that a cluster can be run deterministically in one process:
//
//   - a messenger carries its Raft messages to the other members (the TCP
//     transport of transport.go; tests use an in-memory network that
//     drops, delays, reorders and partitions messages);
//   - a clock (clockwork.Clock) drives its Raft ticks, heartbeat entries,
//     store syncs and retry pauses, and bounds its writes' proposal
//     timeouts (the wall clock; tests advance a manual clock).
//
// Start uses TCP and the wall clock; start takes both.

// messenger sends a member's Raft messages to its peers and hands it the
// messages they send (through the member's inbound). Raft tolerates lost,
// duplicated and reordered messages: a messenger promises no delivery,
// only that what it delivers came from the member it names (From) and is
// addressed to this one.
type messenger interface {
	// send queues messages for their peers and never blocks. A message
	// that cannot be sent is reported through inbound.unreachable (and a
	// snapshot through inbound.snapshotDone).
	send(msgs []*pb.Message)
	// setPeer adds a peer or changes its address; removePeer forgets it.
	setPeer(id uint64, addr string)
	removePeer(id uint64)
	// replAddr is the replication address peer id told this member ("" if
	// unknown): where a member behind the log fetches a checkpoint.
	replAddr(id uint64) string
	// close stops sending and receiving; it returns once nothing more will
	// be delivered.
	close()
}

// inbound is what a messenger tells its member. None of these block.
type inbound struct {
	deliver      func(m *pb.Message) bool // false: the member's inbox is full (dropped)
	known        func(id uint64) bool     // is id a member (or a configured peer)?
	memberAddr   func(id uint64) string   // member id's Raft address ("" if none)
	unreachable  func(id uint64)          // a message to id was lost
	snapshotDone func(id uint64, ok bool) // a snapshot message to id was sent, or lost
}

// connectTCP starts the member's TCP transport, listening on cfg.Ln or
// cfg.Listen.
func connectTCP(cfg Config, cluster [16]byte, in inbound, log *slog.Logger) (messenger, error) {
	tr := newTransport(cfg.Database, cfg.Metrics, cluster, cfg.NodeID, cfg.ReplAddr, cfg.Dial, log)
	tr.deliver, tr.known, tr.memberAddr = in.deliver, in.known, in.memberAddr
	tr.unreachable, tr.snapshotled = in.unreachable, in.snapshotDone
	tr.describe = cfg.Describe
	ln := cfg.Ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("raft listen %s: %w", cfg.Listen, err)
		}
	}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tr.serve(cfg.Listener(ln))
	}()
	return tr, nil
}

// wallClock is the clock of a member started with Start.
var wallClock = clockwork.NewRealClock()

// withTimeout is context.WithTimeout on clock: the context ends with
// context.DeadlineExceeded once d has passed on clock. On the wall clock it
// is context.WithTimeout itself. (clockwork.WithTimeout is not used: its
// context's Err blocks until the context ends, where a context must
// answer nil.)
func withTimeout(parent context.Context, clock clockwork.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if clock == wallClock {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := clock.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	deadline := clock.Now().Add(d)
	if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
		deadline = pd
	}
	return clockContext{ctx, deadline}, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// clockContext is a context that ends at a deadline on a clock.
type clockContext struct {
	context.Context // from context.WithCancelCause, cancelled at the deadline
	deadline        time.Time
}

func (c clockContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c clockContext) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
