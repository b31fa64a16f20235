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

func TestNextInterval(t *testing.T) {
	const s, mib = time.Second, 1 << 20
	for _, c := range []struct {
		cur      time.Duration
		released int64
		want     time.Duration
	}{
		{30 * s, 0, 60 * s},                 // little: back off
		{60 * s, mib - 1, 120 * s},          //
		{160 * s, 0, MaxInterval},           // no further than the longest
		{MaxInterval, 0, MaxInterval},       //
		{120 * s, mib, 120 * s},             // some: keep the pace
		{120 * s, 8*mib - 1, 120 * s},       //
		{120 * s, 8 * mib, 60 * s},          // much: come back sooner
		{MinInterval, 1 << 30, MinInterval}, // no sooner than the shortest
		{0, 8 * mib, MinInterval},           //
	} {
		if got := NextInterval(c.cur, c.released); got != c.want {
			t.Errorf("NextInterval(%v, %d) = %v, want %v", c.cur, c.released, got, c.want)
		}
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx) }()
	time.Sleep(5 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
