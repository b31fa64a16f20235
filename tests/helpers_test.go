package tests

import (
	"testing"
	"time"
)

// waitCount waits until count() reaches want; a test that needs work done
// (writes acknowledged, reads answered) waits for it rather than for a
// time, so that a loaded machine only slows it down.
func waitCount(t *testing.T, what string, want int, count func() int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := count()
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d in two minutes, want %d", what, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
