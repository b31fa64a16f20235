// Package watch streams a database's changes to many watchers at the cost
// of one reader of the log, and within a write budget that keeps a storm
// of changes from taking CPU from readers.
//
// A Hub follows one store: its single goroutine (Run) waits on
// store.Changed, reads the new entries once with bounded ReadLog calls and
// appends each batch's changes under each watched prefix to that prefix's
// feed. A feed is shared by every live subscriber of the prefix: the
// changes are filtered, kept and encoded (Batch.Encoded) once per prefix,
// and each subscriber follows the feed with its own cursor on its own
// goroutine. The hub's work per batch grows with the number of distinct
// prefixes, not of watchers.
//
// A subscriber writes to its watcher only during a write turn of the
// process's Budget (shared by the hubs of all databases): at most
// Limits.WriteRate turns per second and Limits.WriteConcurrency at once.
// It waits for its turn, then writes everything that arrived meanwhile in
// one write. Under a storm (a change reaching thousands of watchers, many
// times a second) the writes are spread and coalesced: the cost is
// delivery delay, about watchers / WriteRate seconds, visible in
// turn_wait_seconds and delivery_delay_seconds, while reads keep the CPUs
// the budget leaves. Turns rather than a rate alone: the Go scheduler
// favours goroutines woken by other goroutines and timers over those
// woken by the network, so thousands of watchers woken at their own pace
// would keep every P busy and leave readers queued; with WriteConcurrency
// turns at a time, delivery occupies at most that many Ps.
//
// # Invariants
//
//   - The hub never waits for a subscriber. Each feed keeps its newest
//     batches within Config.BufferBatches and BufferBytes (the newest one
//     always); a subscriber that needs an evicted batch fell behind and
//     fails with ErrSlow, after the batches before it. It has everything
//     through Sub.LastIndex and may resume from there.
//   - No gap, no duplicate. A subscriber whose from index is behind the
//     hub reads the log itself (Sub.Next, on the caller's goroutine, in
//     bounded batches), and joins its feed under the hub's lock only once
//     it has read through the hub's position. It joins at the feed's tail
//     and skips changes up to the index it read through. Everything after
//     comes from the feed, which the hub appends to under the same lock.
//   - Progress is never ahead of delivery. The hub publishes its position
//     after appending a batch to every feed; a subscriber loads the
//     position first, then finds its feed consumed, and only then reports
//     the position as progress. Heartbeat entries carry no changes but
//     move the position.
//   - A from index older than the retained log fails with an error
//     wrapping store.ErrLogTruncated: the client must re-read (scan) and
//     watch from the scan's index. The API answers it 410 "reread". A hub
//     that itself falls behind the retained log ends every feed with that
//     error.
//   - At most Limits.MaxWatchers subscribers (live or catching up) per
//     Budget, so per process; more fail with ErrTooManyWatchers.
//   - A turn lasts until Sub.Delivered, the next Next or Close, and at
//     most turnLease (2ms): a write blocked on a client that does not
//     read holds up no one else for longer.
//   - When Run returns (its context done, or the store closed) every
//     subscriber fails with ErrClosed at once, whether it waits for
//     changes, for a turn or reads the log, and Subscribe fails with
//     ErrClosed.
//
// Metrics (subsystem "watch"): watchers{db}, prefixes{db} (distinct
// watched prefixes: feeds), hub_lag_entries{db}, events_sent_total,
// writes_total (their ratio is the coalescing), delivery_delay_seconds
// (entry commit time to written to the watcher, recorded by the caller
// through Sub.Delivered), turn_wait_seconds and turn_waiting (the budget
// at work), turn_lease_expired_total, subscribers_cut_total{reason} (slow,
// truncated, shutdown) and refused_total (MaxWatchers reached).
package watch
