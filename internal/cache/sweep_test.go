package cache

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
)

// sweepRec is one value record of a fakeCursor.
type sweepRec struct {
	key    string
	index  uint64
	size   int64
	remote bool // the value is not stored here
	bad    bool // the record cannot be read
}

// fakeCursor is a sorted list of records.
type fakeCursor struct {
	recs []sweepRec
	at   int
}

var errUnreadable = errors.New("unreadable record")

func (c *fakeCursor) SeekGE(key []byte) ([]byte, bool) {
	c.at = sort.Search(len(c.recs), func(i int) bool { return c.recs[i].key >= string(key) })
	return c.key()
}

func (c *fakeCursor) Next() ([]byte, bool) {
	c.at++
	return c.key()
}

func (c *fakeCursor) key() ([]byte, bool) {
	if c.at >= len(c.recs) {
		return nil, false
	}
	return []byte(c.recs[c.at].key), true
}

func (c *fakeCursor) Record() (uint64, int64, bool, error) {
	r := c.recs[c.at]
	if r.bad {
		return 0, 0, false, errUnreadable
	}
	return r.index, r.size, !r.remote, nil
}

// stored returns n stored records k00.. of size bytes written at index.
func stored(n int, index uint64, size int64) []sweepRec {
	recs := make([]sweepRec, n)
	for i := range recs {
		recs[i] = sweepRec{key: fmt.Sprintf("k%02d", i), index: index, size: size}
	}
	return recs
}

// runSweep runs one round and returns the keys given up, and next as a
// string ("-" for nil).
func runSweep(c *Clock, recs []sweepRec, hand []byte, floor uint64, need int64) (victims []string, next string, cycled bool) {
	victims, n, cycled := runRound(c, recs, Hand{At: hand, Turn: hand}, floor, need)
	if n.At == nil {
		return victims, "-", cycled
	}
	return victims, string(n.At), cycled
}

// runRound runs one round from h and returns the keys given up.
func runRound(c *Clock, recs []sweepRec, h Hand, floor uint64, need int64) (victims []string, next Hand, cycled bool) {
	next, cycled = c.Sweep(&fakeCursor{recs: recs}, h, floor, need, func(key []byte, index uint64) {
		victims = append(victims, fmt.Sprintf("%s@%d", key, index))
	})
	return victims, next, cycled
}

func TestSweep(t *testing.T) {
	mixed := []sweepRec{
		{key: "a", index: 1, size: 10},
		{key: "b", index: 2, size: 10, remote: true},
		{key: "c", index: 3, size: 10},
		{key: "d", index: 9, size: 10}, // in the window (floor 5)
		{key: "e", index: 4, size: 10},
	}
	for _, tc := range []struct {
		name    string
		recs    []sweepRec
		hand    string // "": nil
		floor   uint64
		need    int64
		victims []string
		next    string
		cycled  bool
	}{
		{name: "empty cache from the first key", need: 100, next: "-", cycled: true},
		{name: "empty cache from a hand", hand: "m", need: 100, next: "-", cycled: true},
		{name: "nothing needed", recs: mixed, floor: 5, need: 0, next: "a"},
		{name: "negative need keeps the hand", recs: mixed, hand: "c", floor: 5, need: -50, next: "c"},
		{name: "gives up stored values outside the window", recs: mixed, floor: 5, need: 100,
			victims: []string{"a@1", "c@3", "e@4"}, next: "-", cycled: true},
		{name: "stops once need is freed", recs: mixed, floor: 5, need: 20,
			victims: []string{"a@1", "c@3"}, next: "d"},
		{name: "a value written at the floor is outside the window", recs: mixed, floor: 3, need: 100,
			victims: []string{"a@1", "c@3"}, next: "-", cycled: true},
		{name: "window longer than the log", recs: mixed, floor: 0, need: 100, next: "-", cycled: true},
		{name: "wraps and stops at its start", recs: mixed, hand: "c", floor: 2, need: 100,
			victims: []string{"a@1"}, next: "c", cycled: true},
		{name: "hand past the last key wraps", recs: mixed, hand: "z", floor: 5, need: 15,
			victims: []string{"a@1", "c@3"}, next: "d"},
		{name: "hand on a key gone since", recs: mixed, hand: "bb", floor: 5, need: 100,
			victims: []string{"c@3", "e@4", "a@1"}, next: "c", cycled: true},
		{name: "unreadable record ends the round", recs: []sweepRec{{key: "a", index: 1, size: 5}, {key: "b", bad: true}, {key: "c", index: 1, size: 5}},
			floor: 5, need: 100, victims: []string{"a@1"}, next: "-"},
		{name: "all remote", recs: []sweepRec{{key: "a", index: 1, remote: true}, {key: "b", index: 1, remote: true}},
			floor: 5, need: 100, next: "-", cycled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hand []byte
			if tc.hand != "" {
				hand = []byte(tc.hand)
			}
			victims, next, cycled := runSweep(NewClock(), tc.recs, hand, tc.floor, tc.need)
			if !slices.Equal(victims, tc.victims) || next != tc.next || cycled != tc.cycled {
				t.Fatalf("victims %v, next %s, cycled %v; want %v, %s, %v", victims, next, cycled, tc.victims, tc.next, tc.cycled)
			}
		})
	}
}

// TestSweepGivesAReadValueASecondChance: a value read since the hand last
// passed is kept for one more turn; a value in the window keeps its
// reference bit (the hand does not pass over it as a candidate).
func TestSweepGivesAReadValueASecondChance(t *testing.T) {
	c := NewClock()
	recs := []sweepRec{{key: "a", index: 1, size: 10}, {key: "b", index: 1, size: 10}, {key: "w", index: 9, size: 10}}
	c.Touch([]byte("a"))
	c.Touch([]byte("w"))
	victims, _, cycled := runSweep(c, recs, nil, 5, 100)
	if !slices.Equal(victims, []string{"b@1"}) || !cycled {
		t.Fatalf("first turn gave up %v (cycled %v), want [b@1]", victims, cycled)
	}
	victims, _, _ = runSweep(c, recs, nil, 5, 100)
	if !slices.Equal(victims, []string{"a@1", "b@1"}) {
		t.Fatalf("second turn gave up %v, want a (its chance used) and b", victims)
	}
	if !c.SecondChance([]byte("w")) {
		t.Fatal("the hand cleared the reference bit of a value in the window")
	}
}

func TestSweepIsBounded(t *testing.T) {
	many := stored(MaxVictims+10, 1, 1)
	for i := range many {
		many[i].key = fmt.Sprintf("k%06d", i)
	}
	victims, next, cycled := runSweep(NewClock(), many, nil, 5, 1<<40)
	if len(victims) != MaxVictims || next != many[MaxVictims].key || cycled {
		t.Fatalf("%d victims, next %s, cycled %v; want %d, %s, false", len(victims), next, cycled, MaxVictims, many[MaxVictims].key)
	}
	window := stored(MaxSweepKeys+10, 9, 1)
	for i := range window {
		window[i].key = fmt.Sprintf("k%06d", i)
	}
	victims, next, cycled = runSweep(NewClock(), window, nil, 5, 1<<40)
	if len(victims) != 0 || next != window[MaxSweepKeys].key || cycled {
		t.Fatalf("%d victims, next %s, cycled %v; want none, %s, false", len(victims), next, cycled, window[MaxSweepKeys].key)
	}
	// The next round goes on from there: the last 10 records complete
	// the turn, which began at the first key.
	victims, h, cycled := runRound(NewClock(), window, Hand{At: []byte(next)}, 5, 1<<40)
	if len(victims) != 0 || h.At != nil || !cycled {
		t.Fatalf("second round: %d victims, next %q, cycled %v; want none, the first key, a whole turn", len(victims), h.At, cycled)
	}
}

// TestSweepTurnSpansRounds: with more records than one round looks at,
// a turn takes several rounds and is whole, once, when the hand is back
// where it began; a turn that found nothing is then seen as one (the
// keeper's pacer idles on it) instead of never ending.
func TestSweepTurnSpansRounds(t *testing.T) {
	n := 2*MaxSweepKeys + 7
	recs := stored(n, 9, 1) // all in the window: nothing to give up
	for i := range recs {
		recs[i].key = fmt.Sprintf("k%06d", i)
	}
	for _, start := range []int{-1, 0, 5, MaxSweepKeys, n - 1} {
		t.Run(fmt.Sprint("from ", start), func(t *testing.T) {
			var h Hand
			if start >= 0 {
				at := []byte(recs[start].key)
				h = Hand{At: at, Turn: at}
			}
			rounds := 0
			for {
				rounds++
				if rounds > 10 {
					t.Fatalf("no whole turn in %d rounds of %d records", rounds-1, n)
				}
				victims, next, cycled := runRound(NewClock(), recs, h, 5, 1<<40)
				if len(victims) != 0 {
					t.Fatalf("gave up %v from the window", victims)
				}
				if cycled {
					if start < 0 && next.At != nil || start >= 0 && string(next.At) != recs[start].key {
						t.Fatalf("turn ended at %q, want where it began", next.At)
					}
					if !bytes.Equal(next.At, next.Turn) || next.Wrapped {
						t.Fatalf("the next turn %+v does not begin where this one ended", next)
					}
					break
				}
				h = next
			}
			if want := (n + MaxSweepKeys) / MaxSweepKeys; rounds != want && rounds != want+1 {
				t.Fatalf("a turn over %d records took %d rounds, want %d (or one more for the wrap)", n, rounds, want)
			}
		})
	}
}

// TestSweepCopiesTheHand: next does not alias the cursor's key buffer.
func TestSweepCopiesTheHand(t *testing.T) {
	recs := stored(3, 1, 10)
	cur := &reusingCursor{fakeCursor: fakeCursor{recs: recs}}
	next, _ := NewClock().Sweep(cur, Hand{}, 0, 100, func([]byte, uint64) {})
	if next.At != nil {
		t.Fatalf("next %q after a whole turn", next.At)
	}
	next, _ = NewClock().Sweep(cur, Hand{}, 0, 0, func([]byte, uint64) {})
	cur.buf[0] = 'X'
	if string(next.At) != "k00" {
		t.Fatalf("next %q changed with the cursor's buffer", next.At)
	}
	// A turn's start, kept from a round that ended on a key, is a copy
	// too.
	turn, _ := NewClock().Sweep(cur, Hand{At: []byte("k01"), Turn: []byte("k01"), Wrapped: true}, 0, 100, func([]byte, uint64) {})
	cur.buf[0] = 'Y'
	if string(turn.At) != "k01" || string(turn.Turn) != "k01" {
		t.Fatalf("a new turn at %q/%q changed with the cursor's buffer", turn.At, turn.Turn)
	}
}

// reusingCursor hands out its keys in one buffer, as a store's iterator
// does.
type reusingCursor struct {
	fakeCursor
	buf []byte
}

func (c *reusingCursor) SeekGE(key []byte) ([]byte, bool) { return c.reuse(c.fakeCursor.SeekGE(key)) }

func (c *reusingCursor) Next() ([]byte, bool) { return c.reuse(c.fakeCursor.Next()) }

func (c *reusingCursor) reuse(k []byte, ok bool) ([]byte, bool) {
	c.buf = append(c.buf[:0], k...)
	return c.buf, ok
}
