package cache

import (
	"strings"
	"testing"
	"time"
)

func TestCheckL2Timing(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		attempt, smin, smax, fetch time.Duration
		want                       string // "" for valid
	}{
		{0, 0, 0, 0, ""},
		{0, 0, 0, 5 * time.Second, ""},
		{ms, ms, ms, 2 * ms, ""},
		{10 * time.Second, time.Minute, time.Hour, time.Minute, ""},
		{ms / 2, 0, 0, 0, "L2 attempt timeout 500µs: want 1ms to 10s"},
		{-ms, 0, 0, 0, "L2 attempt timeout -1ms"},
		{11 * time.Second, 0, 0, 0, "want 1ms to 10s"},
		{time.Second, 0, 0, time.Second, "below the fetch timeout 1s"},
		{0, 0, 0, 100 * ms, "L2 attempt timeout 100ms: want below the fetch timeout 100ms"},
		{0, -ms, 0, 0, "L2 sideline -1ms: want 1ms to 1m"},
		{0, 2 * time.Minute, time.Hour, 0, "L2 sideline 2m0s"},
		{0, 30 * time.Second, 0, 0, "L2 sideline max 10s: want the sideline (30s) to 1h"},
		{0, 0, 100 * ms, 0, "L2 sideline max 100ms: want the sideline (200ms)"},
		{0, 0, 2 * time.Hour, 0, "to 1h"},
	} {
		err := CheckL2Timing(c.attempt, c.smin, c.smax, c.fetch)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %v %v %v: %v", c.attempt, c.smin, c.smax, c.fetch, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v %v %v %v: %v, want %q", c.attempt, c.smin, c.smax, c.fetch, err, c.want)
		}
	}
}
