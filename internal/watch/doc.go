// Package watch streams a database's changes to many watchers at the cost
// of one reader of the log.
//
// A Hub follows one store: its single goroutine (Run) waits on
// store.Changed, reads the new entries once with bounded ReadLog calls and
// fans each batch out to the live subscribers whose prefix matches. The
// changes of a batch are filtered once per distinct prefix and the same
// immutable []Event is handed to every subscriber of that prefix, so N
// watchers cost one log read per commit, not N.
//
// # Invariants
//
//   - The hub never waits for a subscriber. Each live subscriber has a
//     bounded buffer (Config.BufferBatches batches); a send that would
//     block cuts the subscriber with ErrSlow instead. Changes queued before
//     the cut are still returned, so the subscriber knows the last index it
//     has everything through (Sub.LastIndex) and can resume from it.
//   - No gap, no duplicate. A subscriber whose from index is behind the
//     hub reads the log itself (Sub.Next, on the caller's goroutine, in
//     bounded batches), and joins the live feed under the hub's lock only
//     once it has read through the hub's position. It registers with the
//     index it has read through ("after"); the hub skips entries up to it.
//     Everything after comes from the hub, which fans out under the same
//     lock.
//   - Progress is never ahead of delivery. The hub publishes its position
//     after sending a batch (or cutting the subscribers it could not send
//     to); a subscriber loads the position first, then finds its buffer
//     empty and itself not cut, and only then reports the position as
//     progress. Heartbeat entries carry no changes but move the position.
//   - A from index older than the retained log fails with an error
//     wrapping store.ErrLogTruncated: the client must re-read (scan) and
//     watch from the scan's index. The API answers it 410 "reread".
//   - At most Config.MaxWatchers subscribers (live or catching up) per hub;
//     more fail with ErrTooManyWatchers.
//   - When Run returns (its context done, or the store closed) every live
//     subscriber is cut with ErrClosed, catching-up ones get ErrClosed on
//     their next read, and Subscribe fails with ErrClosed.
//
// Metrics (subsystem "watch"): watchers{db}, events_sent_total,
// subscribers_cut_total{reason} (slow, truncated, shutdown),
// delivery_delay_seconds (entry commit time to written to the watcher,
// recorded by the caller through Sub.Delivered) and hub_lag_entries{db}.
package watch
