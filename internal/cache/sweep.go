package cache

// The CLOCK hand. A keeper that must free bytes sweeps a proxy's value
// records in key order from where its hand stopped last, wrapping once
// from the last key to the first, and gives up a value only if it is
// stored there, outside the window, and was not read since the hand last
// passed (Clock.SecondChance clears the bit of one that was). One round
// is bounded (MaxSweepKeys records looked at, MaxVictims values given
// up), and ends as soon as the values given up add up to the bytes
// needed; the next round goes on from where it stopped.

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

// Sweep runs one round of the CLOCK hand over cur, from hand (nil: the
// first key), with the window's floor (values written above it are
// never given up) and need, the bytes to free. It calls evict with each
// value it gives up: the key (valid only during the call) and the
// version. next is where the following round starts (nil: the first
// key); cycled reports that the hand came back to where it started, or
// to the first key, within this round: a whole turn is done. A record
// that cannot be read ends the round, and the next starts at the first
// key again.
func (c *Clock) Sweep(cur SweepCursor, hand []byte, floor uint64, need int64, evict func(key []byte, index uint64)) (next []byte, cycled bool) {
	wrapped := hand == nil
	var freed int64
	victims := 0
	k, ok := cur.SeekGE(hand)
	for n := 0; n < MaxSweepKeys && victims < MaxVictims && freed < need; n++ {
		if !ok {
			if wrapped {
				return nil, true
			}
			wrapped = true
			k, ok = cur.SeekGE(nil)
			continue
		}
		if wrapped && hand != nil && string(k) >= string(hand) {
			return append([]byte(nil), k...), true
		}
		index, size, stored, err := cur.Record()
		if err != nil {
			return nil, false
		}
		if stored && index <= floor && !c.SecondChance(k) {
			evict(k, index)
			victims++
			freed += size
		}
		k, ok = cur.Next()
	}
	if ok {
		return append([]byte(nil), k...), false
	}
	return nil, wrapped // at the end: a full turn if it started at the first key
}
