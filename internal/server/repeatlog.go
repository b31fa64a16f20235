package server

import (
	"log/slog"
	"sync"
	"time"
)

// repeatLog logs a failure that repeats every few hundred milliseconds
// (a heartbeat on a full disk) once, then at most once per interval while
// it goes on, saying how many were not logged; the first success after a
// failure is logged once too.
type repeatLog struct {
	interval time.Duration

	mu         sync.Mutex
	failing    bool
	last       time.Time // of the last failure logged
	suppressed int
}

// failed logs msg with err now if it is the first failure or interval has
// passed since the last one logged.
func (r *repeatLog) failed(log *slog.Logger, now time.Time, msg string, err error, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing && now.Sub(r.last) < r.interval {
		r.suppressed++
		return
	}
	log.Warn(msg, append(args, "err", err, "not_logged_since", r.suppressed)...)
	r.failing, r.last, r.suppressed = true, now, 0
}

// ok ends a run of failures, logging msg once if there was one.
func (r *repeatLog) ok(log *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing {
		log.Info(msg, args...)
	}
	r.failing, r.suppressed = false, 0
}
