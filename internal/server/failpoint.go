//go:build qsfailpoints

package server

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

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
	v, ok = strings.CutPrefix(v, "raft-after-persist:")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}
