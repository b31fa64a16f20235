// Package bridge writes the changes of an external system of record
// (PostgreSQL, etcd) into a qs root, exactly once across crashes.
//
// A bridge keeps its position in the source (a PostgreSQL LSN, an etcd
// revision) in qs itself, under a state key, and writes it in the same
// atomic batch as the changes it covers: qs holds a change if and only if
// it holds the position after it. Every batch is conditioned on the index
// of the state key the bridge last wrote or read, so a second bridge
// writing the same state key makes the next batch fail instead of
// interleaving. The source is told a position is done only after qs
// acknowledged the batch that stores it; after a crash the bridge reads
// its position back from qs, asks the source to resend from there and
// skips what it resends at or below it.
//
// The subpackages hold each source: pgbridge (logical replication with
// pgoutput) and etcdbridge (a watch from a revision). qsbridge is the
// exception: it copies another root's log verbatim into a bridged root,
// whose log is its position, and uses no state key.
package bridge
