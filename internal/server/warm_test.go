package server

import (
	"testing"

	"github.com/quicksilver-kv/qs/internal/repl"
)

func TestCaughtUp(t *testing.T) {
	for _, c := range []struct {
		rs   repl.ReplicaState
		want bool
	}{
		{repl.ReplicaState{Status: repl.StatusStreaming, ServerIndex: 10, AppliedIndex: 10}, true},
		{repl.ReplicaState{Status: repl.StatusStreaming, ServerIndex: 10, AppliedIndex: 12}, true},
		{repl.ReplicaState{Status: repl.StatusStreaming, ServerIndex: 10, AppliedIndex: 9}, false},
		{repl.ReplicaState{Status: repl.StatusStreaming}, false},
		{repl.ReplicaState{Status: repl.StatusDisconnected, ServerIndex: 10, AppliedIndex: 10}, false},
	} {
		if got := caughtUp(c.rs); got != c.want {
			t.Errorf("%+v: %v, want %v", c.rs, got, c.want)
		}
	}
}

func TestRemoteFetches(t *testing.T) {
	if got := remoteFetches(100, 30); got != 70 {
		t.Errorf("100 fetched, 30 L2 hits: %d", got)
	}
	if got := remoteFetches(5, 7); got != 0 {
		t.Errorf("5 fetched, 7 L2 hits: %d", got)
	}
}
