// Package blocksock reads and writes a socket with blocking system calls on
// the calling thread, instead of parking the goroutine in Go's network
// poller.
//
// Through the poller, data that arrives for a waiting goroutine wakes the
// poller's thread, which hands the goroutine to a P, which may have to wake
// another thread to run it: two or three wake-ups, each of which waits for a
// CPU when the machine is busy. A thread blocked in read(2) is woken by the
// kernel itself, once, and carries on. The memcached front door serves
// connections this way (internal/api/memcache), and `qs bench readlat`
// measures read latency this way, so that the client's own wake-ups do not
// hide the server's (docs/benchmarks.md, "Event loops and dedicated read threads").
//
// A goroutine blocked in a Sock call keeps its thread, not its P: Go runs
// other goroutines meanwhile. Callers that want the same thread for every
// call lock it (runtime.LockOSThread).
package blocksock

import (
	"errors"
	"time"
)

// ErrUnsupported is returned by New where blocking sockets are not
// implemented (everywhere but Linux).
var ErrUnsupported = errors.ErrUnsupported

// timeoutStep is the granularity of socket timeouts: finer would mean a
// setsockopt before nearly every read.
const timeoutStep = 10 * time.Millisecond

// timeoutUntil returns the socket timeout for deadline, or false if the
// deadline has passed.
func timeoutUntil(deadline time.Time) (time.Duration, bool) {
	d := time.Until(deadline)
	if d <= 0 {
		return 0, false
	}
	return (d + timeoutStep - 1) / timeoutStep * timeoutStep, true
}
