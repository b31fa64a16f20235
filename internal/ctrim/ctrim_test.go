package ctrim

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func TestResidentBytes(t *testing.T) {
	n, ok := ResidentBytes()
	if runtime.GOOS != "linux" {
		if ok {
			t.Errorf("resident bytes %d read off Linux", n)
		}
		return
	}
	if !ok || n <= 0 {
		t.Fatalf("ResidentBytes() = %d, %v on Linux", n, ok)
	}
	// 64 MiB more written Go memory is resident.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	m, _ := ResidentBytes()
	runtime.KeepAlive(b)
	if m-n < 32<<20 {
		t.Errorf("resident %d → %d after writing 64 MiB", n, m)
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
