// Package raftroot runs one member of a replicated (HA) root: a database
// whose writes are agreed on by three or five members with Raft
// (go.etcd.io/raft), each applying the committed log to its own store.
//
// A Node owns a raft.RawNode and drives it from one goroutine (node.go):
// tick, step received messages, propose, and for every Ready persist the
// hard state and entries (storage.go: its own Pebble instance, fsynced
// before any vote or acknowledgement is sent; a leader sends its appends
// while it persists them), send messages (transport.go), apply the
// committed entries with store.ApplyRaft, and Advance.
//
// The member meets the world at two seams (seams.go): a messenger carries
// its Raft messages (the TCP transport; tests use an in-memory network
// that drops, delays, reorders and partitions them) and a clock drives
// its ticks, heartbeats, store syncs and proposal timeouts (the wall
// clock; tests advance a manual one). What a write's proposer is told is
// decided by classify (outcome.go), a pure function of what happened to
// the write and how many copies of it Raft took.
//
// # Invariants
//
//   - The committed Raft log is the only writer of the store. A command
//     (command.go) carries the batch, the proposer's time (its wall clock,
//     bounded by the real time it measured since it learned the log's
//     time: store.Store.ProposalTime) and a random id;
//     the store's committer evaluates it deterministically, so every
//     member's log has the same entries, indexes and hashes.
//   - Exactly once: the store keeps the Raft index of the last applied
//     command in the batch of its effects; after a crash the member skips
//     what the store holds and applies the rest. The store applies without
//     fsync (the Raft log is durable first) and is synced once a second and
//     before the Raft log is compacted past it.
//   - A write is answered only after the member that took it applied it:
//     it is then committed (durable on a quorum). A follower forwards
//     proposals to the leader; a proposal is proposed again when the
//     leader changes, and the store applies its batch id once (a write
//     without one gets one from the member that took it).
//   - A member applies a Raft snapshot only once its store has reached it:
//     snapshots carry metadata only, and the store is brought up to date
//     with a checkpoint fetched over replication (Config.FetchSnapshot).
//   - Bad input never reaches Raft: transport frames are CRC-checked and
//     connections are bound by a hello to one cluster, one sender and one
//     receiver; a corrupt or foreign Raft storage refuses to open.
//
// docs/architecture.md ("The HA root") explains the design, and
// docs/operations.md ("Running an HA root") how to run and change it.
package raftroot
