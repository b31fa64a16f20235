package server

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRepeatLogSaysARepeatedFailureOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	r := repeatLog{interval: time.Minute}
	t0 := time.Unix(1000, 0)
	disk := errors.New("disk full")
	lines := func() int { return strings.Count(buf.String(), "heartbeat not written") }

	// Twice a second for 30 s: one line.
	for i := 0; i < 60; i++ {
		r.failed(log, t0.Add(time.Duration(i)*500*time.Millisecond), "heartbeat not written", disk)
	}
	if n := lines(); n != 1 {
		t.Fatalf("%d lines for 60 failures within a minute, want 1:\n%s", n, buf.String())
	}
	// A minute after the first: a second line, counting the others.
	r.failed(log, t0.Add(time.Minute), "heartbeat not written", disk)
	if n := lines(); n != 2 || !strings.Contains(buf.String(), "not_logged_since=59") {
		t.Fatalf("after a minute: %d lines, want 2 saying 59 were not logged:\n%s", n, buf.String())
	}
	// Recovery is said once, and the next failure is logged at once.
	r.ok(log, "heartbeat written again")
	r.ok(log, "heartbeat written again")
	if n := strings.Count(buf.String(), "heartbeat written again"); n != 1 {
		t.Fatalf("recovery logged %d times, want 1", n)
	}
	r.failed(log, t0.Add(time.Minute+time.Second), "heartbeat not written", disk)
	if n := lines(); n != 3 {
		t.Fatalf("a failure after recovery was not logged: %d lines", n)
	}
}
