package server

import (
	"testing"
	"time"
)

func TestSourceBackoffDoublesUpToTheCap(t *testing.T) {
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := sourceBackoff(i + 1); got != w {
			t.Errorf("sourceBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := sourceBackoff(1 << 20); got != sourceWaitMax {
		t.Errorf("sourceBackoff(huge) = %v, want the cap %v", got, sourceWaitMax)
	}
}
