package repl

import (
	"sync"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// tailBatches holds, for each database a server streams, the newest
// batch of entries one of its streams read from the log, so that the
// other streams waiting at the same position take it without reading the
// log again: after a commit every child stream at the tip wants the same
// entries, and each read is a snapshot and an iterator of the store (a
// root with 8 children spent a fifth of its CPU on them at 100 writes/s).
// While one stream reads from an index, the others that want the same
// index wait for its batch instead of reading too. Entries read from the
// log are applied, and the same at a given index on every node, so any
// stream may send them; they are shared read-only. A database's batch is
// held by name with the store it came from, so that a store replaced
// under the same name (a bootstrap) drops it.
type tailBatches struct {
	mu sync.Mutex
	m  map[string]*tailBatch // by database name
}

type tailBatch struct {
	st      *store.Store
	entries []wal.Entry // the newest batch read
	// reading is the index a stream is reading the log from now (0:
	// none); done is closed when it has put its batch.
	reading uint64
	done    chan struct{}
}

// take returns the held entries of st from next on, at most maxEntries.
// If none are held, it returns a channel to wait on when another stream
// is reading the log from next (then take again); otherwise the caller
// reads the log itself and must then call put with mine, even with
// nothing read (mine is nil if another index is being read). A held
// batch was read within the server's byte bound, and so is any part of
// it.
func (t *tailBatches) take(st *store.Store, next uint64, maxEntries int) (entries []wal.Entry, wait <-chan struct{}, mine *tailBatch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[st.Name()]
	if b == nil || b.st != st {
		b = &tailBatch{st: st}
		if t.m == nil {
			t.m = make(map[string]*tailBatch)
		}
		t.m[st.Name()] = b
	}
	if es := batchFrom(b.entries, next, maxEntries); es != nil {
		return es, nil, nil
	}
	switch b.reading {
	case next:
		return nil, b.done, nil
	case 0:
		b.reading, b.done = next, make(chan struct{})
		return nil, nil, b
	}
	return nil, nil, nil // another index is being read: read it alone
}

// put offers a batch st's log returned from next (possibly none); it is
// held if it ends after the held one (a stream catching up from further
// back does not displace the tip). It ends the read take gave the caller
// (mine, if not nil), waking the streams waiting for it, even if st was
// replaced meanwhile.
func (t *tailBatches) put(st *store.Store, mine *tailBatch, next uint64, batch []wal.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.m[st.Name()]; b != nil && b.st == st && len(batch) > 0 && newerBatch(b.entries, batch) {
		b.entries = batch
	}
	if mine != nil && mine.reading == next {
		close(mine.done)
		mine.reading, mine.done = 0, nil
	}
}

// batchFrom is the part of batch (consecutive entries) from next on, at
// most maxEntries, or nil.
func batchFrom(batch []wal.Entry, next uint64, maxEntries int) []wal.Entry {
	if len(batch) == 0 || next < batch[0].Index || next > batch[len(batch)-1].Index {
		return nil
	}
	out := batch[next-batch[0].Index:]
	if len(out) > maxEntries {
		out = out[:maxEntries]
	}
	return out[:len(out):len(out)]
}

// newerBatch reports whether batch ends after held.
func newerBatch(held, batch []wal.Entry) bool {
	return len(held) == 0 || batch[len(batch)-1].Index > held[len(held)-1].Index
}
