package cache

// The CLOCK hand. A keeper that must free bytes sweeps a proxy's value
// records in key order from where its hand stopped last, wrapping once
// from the last key to the first, and gives up a value only if it is
// stored there, outside the window, and was not read since the hand last
// passed (Clock.SecondChance clears the bit of one that was). One round
// is bounded (MaxSweepKeys records looked at, MaxVictims values given
// up), and ends as soon as the values given up add up to the bytes
// needed; the next round goes on from where it stopped. A turn, the
// hand's pass over every record, may take many rounds (Hand); whether a
// whole turn found anything is what paces the keeper (Pacer).

const (
	// MaxSweepKeys bounds the records one round looks at.
	MaxSweepKeys = 20000
	// MaxVictims bounds the values one round gives up: one request to
	// the store.
	MaxVictims = 4096
	// MaxSweepRounds bounds the rounds of one keeper tick.
	MaxSweepRounds = 8
)

// SweepCursor walks a proxy's value records in key order, for the hand.
// The store's view implements it; the hand never changes a record.
type SweepCursor interface {
	// SeekGE moves to the first record whose key is at or after key (nil:
	// the first record) and returns its key, or false if there is none.
	// The key returned is valid until the cursor moves.
	SeekGE(key []byte) ([]byte, bool)
	// Next moves to the next record and returns its key, or false if
	// there is none.
	Next() ([]byte, bool)
	// Record reads the record the cursor is at: the version (index) of
	// the key's value, its length, and whether the value is stored here
	// (false for a remote record, and for a record that does not decode:
	// the hand passes over it). An error means the record could not be
	// read at all: the round ends there.
	Record() (index uint64, size int64, stored bool, err error)
}

// A Hand is where the CLOCK hand is between rounds: the key it goes on
// from (At; nil: the first key), the key its turn began at (Turn; nil:
// the first key), and whether it has passed the last key since then.
// A turn is whole when the hand, past the last key, comes back to where
// the turn began, in one round or over many: with more records than
// MaxSweepKeys it takes several.
type Hand struct {
	At, Turn []byte
	Wrapped  bool
}

// Sweep runs one round of the CLOCK hand over cur, from h (the zero Hand:
// a turn from the first key), with the window's floor (values written
// above it are never given up) and need, the bytes to free. It calls
// evict with each value it gives up: the key (valid only during the
// call) and the version. next is where the following round goes on
// from; cycled reports that the turn became whole in this round, and
// next then begins a new turn where this one ended. A record that cannot
// be read ends the round, and the next round begins a turn at the first
// key.
func (c *Clock) Sweep(cur SweepCursor, h Hand, floor uint64, need int64, evict func(key []byte, index uint64)) (next Hand, cycled bool) {
	wrapped := h.Wrapped
	var freed int64
	victims := 0
	k, ok := cur.SeekGE(h.At)
	for n := 0; n < MaxSweepKeys && victims < MaxVictims && freed < need; n++ {
		if !ok {
			if wrapped || h.Turn == nil {
				return Hand{}, true // back at the first key, where the turn began
			}
			wrapped = true
			k, ok = cur.SeekGE(nil)
			continue
		}
		if wrapped && string(k) >= string(h.Turn) {
			at := append([]byte(nil), k...)
			return Hand{At: at, Turn: at}, true
		}
		index, size, stored, err := cur.Record()
		if err != nil {
			return Hand{}, false
		}
		if stored && index <= floor && !c.SecondChance(k) {
			evict(k, index)
			victims++
			freed += size
		}
		k, ok = cur.Next()
	}
	if !ok { // at the end of the keys
		if wrapped || h.Turn == nil {
			return Hand{}, true
		}
		return Hand{Turn: h.Turn, Wrapped: true}, false
	}
	return Hand{At: append([]byte(nil), k...), Turn: h.Turn, Wrapped: wrapped}, false
}
