//go:build !qsfailpoints

package server

import "testing"

// TestReleaseHasNoFailpoints: a release build ignores QS_FAILPOINT.
func TestReleaseHasNoFailpoints(t *testing.T) {
	t.Setenv("QS_FAILPOINT", "raft-after-persist:1")
	if failpointAfterPersist(nil) != nil {
		t.Fatal("the release build arms a failpoint from QS_FAILPOINT")
	}
	t.Setenv("QS_FAILPOINT", "repl-forwarded:1")
	if failpointForwarded(nil) != nil {
		t.Fatal("the release build arms repl-forwarded from QS_FAILPOINT")
	}
}
