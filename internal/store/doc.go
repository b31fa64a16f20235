// Package store is one database on Pebble: its log, its data, the history
// proxies read, and the writes, reads, snapshots and checks of all of
// them. docs/storage.md describes the layout on disk, docs/architecture.md
// where the store sits.
//
// # Roles
//
// The same store serves every role a node plays for a database:
//
//   - root: Write and Heartbeat append entries evaluated here;
//   - replica: Apply appends entries received from another node, checked
//     against the hash chain, never evaluated again;
//   - HA root member: ApplyRaft evaluates the committed commands of a Raft
//     log (raftapply.go); once it has, the store takes writes from no
//     other path;
//   - proxy (Options.Proxy): applies the whole log like a replica but
//     keeps values only in a sliding window and a cache, and fetches the
//     others (proxy.go, proxykeep.go, proxyread.go). What it keeps is
//     decided by the cache policy of internal/cache (the window's floor,
//     the limits, the CLOCK hand, the transient tier, the own L2 shard),
//     from plain inputs; the store applies it as committer requests
//     checked against each key's record.
//
// # How a write goes
//
//	Write / Heartbeat / Apply / ApplyRaft   (write.go, raftapply.go)
//	   │ requests
//	pipeline: orders them into groups       (pipeline.go; commitEnv)
//	   │ a group
//	committer.commit                        (commit.go)
//	   ├─ evaluator: command → entry        (evaluate.go; stateReader)
//	   │    the writer's role settles damage (roles.go)
//	   ├─ entries → block, value records     (groupblock.go, keystate.go;
//	   │    full node or proxy: placement.go)
//	   ├─ retention, history, batch IDs     (retire.go, history.go, idempotency.go)
//	   └─ persist: log segment fsync, then Pebble batch (segment.go)
//	publish: applied index, read cache, watchers
//
// The committer (commit.go) keeps the wiring and each group's sequence;
// every concern it drives owns its state and the code that only touches
// it:
//
//	groupPending   a group's batch, lookups, block, deferred records and
//	               changes, cleared for each group (groupblock.go)
//	retention      log retention and the retired blocks (retire.go)
//	historyWriter  the MVCC history's record and versions (history.go)
//	proxyWriter    a proxy's cache counters (proxy.go)
//	replayState    the block a replay at open applies again (segstore.go)
//
// The evaluator is pure: a command's entry depends only on the command,
// the log format's bounds and the state, so every member of an HA root
// writes the same entries (TestEvaluationIsTheSameOnEveryMember). Local
// limits are checked before (Write, ValidateBatch), and the clock is read
// by the caller.
//
// # Key spaces
//
// Each key of the Pebble instance starts with one byte (keys.go):
//
//	m  metadata: applied record, log record, stats, format, Raft index,
//	   segment tail and use, retired blocks, block summaries, proxy state
//	d  value record of a live key (record.go)
//	c  chunk of a large value
//	e  expiry index: keys with an expiry, in expiry order (expiry.go)
//	l  log block, or a reference to it in a log segment
//	h  MVCC history of overwritten and deleted values (history.go)
//	i  batch ID outcome; j  the same in time order (idempotency.go)
//
// # Record kinds
//
// A value record (record.go, recordKind) is inline (holds the value),
// chunked (the value in c chunks), in-log (the value in a log block),
// remote (a proxy's: the value is elsewhere) or lost (history of a value
// that was unreadable when it was overwritten). History versions are
// inline, in-log (pointing at the block the value record pointed to) or
// lost records.
//
// # Files
//
//	store.go, options.go, errors.go     Open, Close, options, errors
//	write.go, commit.go, pipeline.go    the write path
//	evaluate.go, roles.go               evaluation and damage policy
//	placement.go                        where a role keeps applied values
//	keystate.go, groupblock.go          a group's view of keys, its block,
//	                                    its scratch state (groupPending)
//	diskspace.go                        the free-space reserve
//	damage.go                           damaged engine files: counted, not fatal
//	read.go, cache.go, log.go           reads, the read cache, ReadLog
//	segment.go, segfiles.go,            log segments: format, files,
//	segstore.go, seguse.go              replay (replayState), collection,
//	                                    use counts
//	retire.go, summary.go               retention of blocks values point
//	                                    into (retention)
//	history.go                          MVCC history (historyWriter)
//	expiry.go                           expiry index, the expiry policy
//	idempotency.go, raftapply.go        batch IDs, Raft apply
//	snapshot.go                         checkpoints, snapshot install
//	bootstrap.go, bootstrap_sync.go     receiving a snapshot: download,
//	                                    resume, checks, background syncs,
//	                                    the ready switch
//	proxy.go                            the proxy role: options, records,
//	                                    cache requests in the committer
//	                                    (proxyWriter)
//	proxykeep.go                        the cache keeper: limits, sweeps,
//	                                    compactions (policy: internal/cache)
//	proxyread.go                        reads through to the replicas
//	proxytransient.go, proxyshard.go,   the transient tier, the L2 shard
//	proxywarm.go                        budget and its warm-up
//	verify.go, verify_log.go,           the offline check (qs verify)
//	verify_history.go
//	metrics.go, instruments.go,         metrics: counted per store in
//	engine_metrics.go                   atomics, read with Metrics (exported
//	                                    by internal/metrics/storecollector)
//	engine_memory.go                    the open stores' engine memory
//	usage.go                            usage per key prefix
package store
