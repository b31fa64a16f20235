//go:build qsfailpoints

package server

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// A qs built with the qsfailpoints tag (for crash tests, never a
// release) reads failpoints from QS_FAILPOINT; failpoint_release.go is
// the release build's side, which has none.

// failpointAfterPersist reads QS_FAILPOINT=raft-after-persist:N: the
// process kills itself (SIGKILL) right after the N-th Raft persist that
// has committed entries to apply, before applying them.
func failpointAfterPersist(st *store.Store) func(uint64) {
	n, ok := afterPersistCount(os.Getenv("QS_FAILPOINT"))
	if !ok {
		return nil
	}
	var seen atomic.Int64
	return func(committed uint64) {
		if seen.Add(1) == int64(n) {
			fmt.Fprintf(os.Stderr, "failpoint raft-after-persist: killing the process with raft entries committed up to %d, applied up to %d\n", committed, st.RaftApplied())
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

// afterPersistCount parses the value of QS_FAILPOINT: N of
// raft-after-persist:N, ok false if it names no such failpoint.
func afterPersistCount(v string) (n int, ok bool) {
	return failpointCount(v, "raft-after-persist:")
}

// failpointCount parses the value of QS_FAILPOINT: N of nameN (name ends
// with its colon), ok false if it names another failpoint or N < 1.
func failpointCount(v, name string) (n int, ok bool) {
	v, ok = strings.CutPrefix(v, name)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// failpointForwarded reads QS_FAILPOINT=repl-forwarded:N: a replica kills
// itself (SIGKILL) once it has sent the N-th verified batch to a child
// (cut-through) and before its own store applied the batch. Batches
// count from the first one after some entry went to a child this way.
func failpointForwarded(st *store.Store) func(uint64) {
	n, ok := failpointCount(os.Getenv("QS_FAILPOINT"), "repl-forwarded:")
	if !ok {
		return nil
	}
	var seen atomic.Int64
	return func(last uint64) {
		if repl.ForwardedIndex(st) == 0 || seen.Add(1) != int64(n) {
			return
		}
		// The stream to the child sends the batch while this waits.
		deadline := time.Now().Add(30 * time.Second)
		for repl.ForwardedIndex(st) < last && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if repl.ForwardedIndex(st) < last {
			fmt.Fprintf(os.Stderr, "failpoint repl-forwarded: batch up to %d not sent to a child; not killing\n", last)
			return
		}
		fmt.Fprintf(os.Stderr, "failpoint repl-forwarded: killing the process with entries forwarded up to %d, durable up to %d\n", repl.ForwardedIndex(st), st.AppliedIndex())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
