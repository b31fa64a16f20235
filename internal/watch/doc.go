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
// prefixes, not of watchers. With no live subscriber it reads nothing: it
// moves its position to the store's applied position (skipIdle); a
// subscriber arriving later from an older index reads the log itself up
// to there, as any subscriber behind the hub does.
//
// A subscriber writes to its watcher only during a write turn of the
// process's Budget (shared by the hubs of all databases): at most
// Limits.WriteConcurrency turns at once and at most the budget's rate per
// second. It waits for its turn, then writes everything that arrived
// meanwhile in one write. Turns rather than a rate alone: the Go
// scheduler favours goroutines woken by other goroutines and timers over
// those woken by the network, so thousands of watchers woken at their own
// pace would keep every P busy and leave readers queued; with
// WriteConcurrency turns at a time, delivery occupies at most that many
// Ps.
//
// The rate adapts (Budget.Run, control.go). Every 100ms the budget
// measures how late a goroutine woken by the network runs (probe.go: a
// byte through a pipe, every 2ms while delivery is busy, as a reader's
// request arrives on its connection) and compares the 90th percentile with
// a limit: twice the baseline (at least baseline + 200µs), the same
// percentile measured while turns are paused for 20ms about once a
// second, and never above Limits.WakeDelayTarget. Over the limit, watch
// delivery is slowing readers and the rate is cut (by limit/delay, to
// half at most); within it, and
// with writes waiting for the rate, the rate is raised by 2% of
// Limits.WriteRate, its cap. So when the process has CPU to spare the
// rate sits at the cap and changes reach watchers within milliseconds;
// under a storm (a change reaching thousands of watchers, many times a
// second) or on an overloaded machine the writes are spread and
// coalesced: the cost is delivery delay, visible in turn_wait_seconds
// and delivery_delay_seconds, while reads keep their latency. A floor of
// a turn per watcher every 2s (at least 100/s) keeps every watcher
// moving, well within its prefix's buffer.

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
// watched prefixes: feeds), hub_lag_entries{db}, hub_read_entries_total{db}
// and hub_skipped_entries_total{db} (entries read and fanned out; passed
// unread with no live subscriber), events_sent_total,
// writes_total (their ratio is the coalescing), delivery_delay_seconds
// (entry commit time to written to the watcher, recorded by the caller
// through Sub.Delivered), turn_wait_seconds and turn_waiting (the budget
// at work), turn_lease_expired_total, subscribers_cut_total{reason} (slow,
// truncated, shutdown) and refused_total (MaxWatchers reached). The
// adaptive rate: write_rate and write_rate_floor (turns/s now),
// wake_delay_seconds (every probe), wake_delay_signal_seconds (the last
// window's 90th percentile) and rate_decisions_total{decision} (raise,
// cut, hold, gc_forgiven, no_signal), wake_delay_baseline_seconds.
// They are counted in a Metrics, one per process, which its owner
// registers: the budget's (NewBudget), where every hub sharing that
// budget counts too unless Config.Metrics names another. A hub or budget
// given none counts in one of its own, so a test reads the instance it
// built.
package watch
