// Package qsbridge copies one database's log from a qs root (or any node
// replicating it) into another root, verbatim: the same entries at the
// same indexes with the same hash chain, so the two logs stay one log and
// replicas can move between the roots without a bootstrap, and back.
//
// The bridge is a replication client of the source and an HTTP client of
// the target, a root started bridged (config bridged = true, qs serve
// --bridged DBID). It keeps no state of its own: the target's log is its
// position. Each session reads the target's head (GET /v1/{db}/bridge),
// asks the source to stream from the next index, checks every entry
// against the hash chain from that head, and appends each received batch
// to the target (POST /v1/{db}/bridge), which applies it exactly as a
// replica applies a stream, refusing entries that do not follow its log.
// Across a restart of either side the next session starts from the
// target's durable head, so nothing is lost or applied twice.
//
// A target whose head is not in the source's log has diverged (it took
// other writes, or was bridged from another database): the first entry
// the source sends after that head does not chain from it. The bridge
// stops with ErrDiverged and counts it; nothing is written.
package qsbridge
