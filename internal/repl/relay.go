package repl

import (
	"sync"
	"sync/atomic"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Cut-through: a replica passes each batch it verified to its own
// children at once, while its store makes the batch durable, instead of
// after. The batch is durable at the root already (a server streams only
// what is durable, or what it verified and is making durable), so what a
// child receives early is the root's log all the same: the hash chain the
// child checks proves it continues the child's own log. The replica's own
// restart replays only what it made durable; a child that got further
// than its restarted source is ahead of it, never forked, and waits for
// it to catch up (RefuseAhead, policy.go).
//
// The children go first: the goroutine that received a batch wakes the
// streams waiting for it, then yields its processor before it hands the
// batch to the store. Otherwise the store's committer, woken last, runs
// first on that processor, and the streams wait behind its work, up to its
// fsync, before they send: a hand-off that puts most of the
// intermediate's commit on every child's path.

// relay holds the entries a replica verified and has not yet made
// durable: at most one received batch. The Replica feeds it; the servers
// streaming the same store read from it past the store's applied index.
type relay struct {
	// forwarded is the highest index sent to a child from the relay.
	forwarded atomic.Uint64
	mu        struct {
		sync.Mutex
		entries []wal.Entry // consecutive; each above the durable index
		changed chan struct{}
		// watched: a stream took changed since the last add, so a child
		// may be waiting for the next batch.
		watched bool
	}
}

func newRelay() *relay {
	rl := &relay{}
	rl.mu.changed = make(chan struct{})
	return rl
}

// relays maps a store to the relay of the Replica running on it.
var relays sync.Map // *store.Store → *relay

// relayOf returns the relay of the replica running on st, nil if none.
func relayOf(st *store.Store) *relay {
	if v, ok := relays.Load(st); ok {
		return v.(*relay)
	}
	return nil
}

// add makes verified entries available to the children. Entries that do
// not continue the held ones replace them. It reports whether a stream
// was waiting for them (it asked for changed since the last add).
func (rl *relay) add(entries []wal.Entry) (watched bool) {
	if len(entries) == 0 {
		return false
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if n := len(rl.mu.entries); n == 0 || rl.mu.entries[n-1].Index+1 != entries[0].Index {
		rl.mu.entries = nil
	}
	rl.mu.entries = append(rl.mu.entries, entries...)
	close(rl.mu.changed)
	rl.mu.changed = make(chan struct{})
	watched, rl.mu.watched = rl.mu.watched, false
	return watched
}

// durable drops the entries up to index: the store has them now.
func (rl *relay) durable(index uint64) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	es := rl.mu.entries
	i := 0
	for i < len(es) && es[i].Index <= index {
		i++
	}
	if i == len(es) {
		rl.mu.entries = nil
		return
	}
	rl.mu.entries = es[i:]
}

// drop forgets every held entry (the session that received them ended).
func (rl *relay) drop() {
	rl.mu.Lock()
	rl.mu.entries = nil
	rl.mu.Unlock()
}

// changed returns a channel closed when entries are next added.
func (rl *relay) changed() <-chan struct{} {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.mu.watched = true
	return rl.mu.changed
}

// read returns held entries from index from on, at most maxEntries and
// stopping once maxBytes of bodies are gathered (at least one entry if
// any); nil if from is not among them. The entries are never modified:
// the caller may keep them.
func (rl *relay) read(from uint64, maxEntries, maxBytes int) []wal.Entry {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return batchFrom(rl.mu.entries, from, maxEntries, maxBytes)
}

// sent records that entries up to index went to a child from the relay.
func (rl *relay) sent(index uint64) {
	for {
		f := rl.forwarded.Load()
		if index <= f || rl.forwarded.CompareAndSwap(f, index) {
			return
		}
	}
}

// ForwardedIndex is the highest index the replica running on st sent to
// a child before its store made it durable (cut-through); 0 if none or
// if no replica runs on st.
func ForwardedIndex(st *store.Store) uint64 {
	if rl := relayOf(st); rl != nil {
		return rl.forwarded.Load()
	}
	return 0
}
