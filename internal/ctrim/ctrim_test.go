package ctrim

import (
	"context"
	"testing"
	"time"
)

func TestParseStatm(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"10522 3109 1534 530 0 4386 0\n", 3109 * 4096, true},
		{"1 0 0 0 0 0 0", 0, true},
		{"", 0, false},
		{"10522", 0, false},
		{"10522 x 1534", 0, false},
		{"10522 -4 1534", 0, false},
	} {
		got, ok := parseStatm(c.in, 4096)
		if got != c.want || ok != c.ok {
			t.Errorf("parseStatm(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, time.Millisecond) }()
	time.Sleep(5 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
