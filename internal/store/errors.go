package store

import (
	"context"
	"errors"
)

// Errors returned by the store. Callers at the API edge map them to stable
// codes with errors.Is; every one of them is also counted in a metric.
var (
	// ErrNotRoot: the database is a replica; writes go to the root.
	ErrNotRoot = errors.New("qs: this node is not the write root for the database")
	// ErrConditionFailed: a compare-and-swap condition did not hold.
	ErrConditionFailed = errors.New("qs: condition failed: key index does not match")
	// ErrTooLarge: a key, value or batch exceeds the configured limits.
	ErrTooLarge = errors.New("qs: too large")
	// ErrInvalid: a request is malformed (empty key, unknown op, ...).
	ErrInvalid = errors.New("qs: invalid request")
	// ErrDiskFull: free disk space is below the configured reserve, or the
	// disk returned ENOSPC. Nothing was written; reads keep working.
	ErrDiskFull = errors.New("qs: disk full")
	// ErrWriteFailed: the storage engine failed a durable commit for a reason
	// other than a full disk. The write was not acknowledged.
	ErrWriteFailed = errors.New("qs: durable commit failed")
	// ErrCorrupt: stored data failed an integrity check (value CRC, chunk
	// CRC, log hash chain). The data is never served.
	ErrCorrupt = errors.New("qs: integrity check failed")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("qs: store closed")
	// ErrInUse: another process has the store's directory open.
	ErrInUse = errors.New("qs: data directory in use")
	// ErrLogTruncated: the requested log index is older than the retained log.
	ErrLogTruncated = errors.New("qs: log entry no longer retained")
	// ErrDBIDMismatch: the store belongs to another database.
	ErrDBIDMismatch = errors.New("qs: database id mismatch")
	// ErrNotContiguous: a replicated entry does not follow the applied index
	// or its hash does not chain from the previous entry.
	ErrNotContiguous = errors.New("qs: log entry does not follow the applied log")
	// ErrHistoryTruncated: a read as of an index below the history
	// horizon (older versions were garbage collected, or never kept).
	ErrHistoryTruncated = errors.New("qs: history no longer retained for that index")
	// ErrNotYetApplied: a read as of an index beyond the applied index.
	ErrNotYetApplied = errors.New("qs: index not yet applied")
	// ErrRoleMismatch: the store's data does not fit the configured role
	// (a proxy's partial data opened as a full node).
	ErrRoleMismatch = errors.New("qs: stored data does not fit the database's role")
)

// ErrUnavailable: the request cannot be served now: a write to a replicated
// root with no leader or a member stopping (nothing was written), or a
// proxy read whose values no replica could provide in time (nothing wrong
// was served). Retry.
var ErrUnavailable = errors.New("qs: temporarily unavailable")

// errorKind names an error for the errors_total{kind} metrics.
func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrConditionFailed, "condition_failed"}, {ErrTooLarge, "too_large"},
		{ErrInvalid, "invalid"}, {ErrDiskFull, "disk_full"}, {ErrCorrupt, "corrupt"},
		{ErrClosed, "closed"}, {ErrNotContiguous, "not_contiguous"}, {ErrWriteFailed, "write_failed"},
		{context.Canceled, "canceled"}, {context.DeadlineExceeded, "timeout"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

// ErrorKind is errorKind for other packages' metrics.
func ErrorKind(err error) string { return errorKind(err) }
