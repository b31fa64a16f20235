package cache

import (
	"math"
	"testing"
)

func TestWindowFloor(t *testing.T) {
	for _, tc := range []struct {
		w              Window
		last           uint64
		floor, entries uint64
	}{
		{w: 10, last: 0, floor: 0, entries: 0},                                       // empty log
		{w: 10, last: 3, floor: 0, entries: 3},                                       // window longer than the log
		{w: 10, last: 10, floor: 0, entries: 10},                                     // exactly the log
		{w: 10, last: 11, floor: 1, entries: 10},                                     // the first entry left it
		{w: 10000, last: 1 << 40, floor: 1<<40 - 10000, entries: 10000},              // a long log
		{w: 1, last: 7, floor: 6, entries: 1},                                        // the least window
		{w: 0, last: 7, floor: 7, entries: 0},                                        // no window: nothing held
		{w: -5, last: 7, floor: 7, entries: 0},                                       // a negative window holds nothing
		{w: math.MaxInt64, last: math.MaxUint64, floor: 1 << 63, entries: 1<<63 - 1}, // the largest window
	} {
		if got := tc.w.Floor(tc.last); got != tc.floor {
			t.Errorf("Window(%d).Floor(%d) = %d, want %d", tc.w, tc.last, got, tc.floor)
		}
		if got := tc.w.Entries(tc.last); got != tc.entries {
			t.Errorf("Window(%d).Entries(%d) = %d, want %d", tc.w, tc.last, got, tc.entries)
		}
	}
}
