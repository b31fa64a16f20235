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
// index wait for that read and take its batch. Only one read of a
// database is shared at a time: a stream reading from another index (one
// catching up) reads alone. Entries read from the log are applied, and
// the same at a given index on every node, so any stream may send them;
// they are shared read-only. A database's batch is held by name with the
// store it came from, so that a store closed and opened again under the
// same name starts afresh. Each database keeps its newest batch (at most
// one batch's bytes) while the server runs.
type tailBatches struct {
	mu sync.Mutex
	m  map[string]*tailBatch // by database name
}

type tailBatch struct {
	st      *store.Store
	entries []wal.Entry // the newest batch read
	reading *tailRead   // the read under way, shared; nil if none
}

// A tailRead is one stream's read of the log from next, which the other
// streams at next wait for.
type tailRead struct {
	next    uint64
	done    chan struct{} // closed once entries is set
	entries []wal.Entry   // what the read returned (possibly none)
}

// take returns the held entries of st from next on, within maxEntries and
// maxBytes (batchFrom).
// If none are held and another stream is reading the log from next, it
// returns that read: wait for its done, then take its entries with
// (*tailRead).from. Otherwise the caller reads the log itself and must
// then call put with mine, even with nothing read (mine is nil if
// another index is being read). A held batch was read within the
// server's bounds.
func (t *tailBatches) take(st *store.Store, next uint64, maxEntries, maxBytes int) (entries []wal.Entry, wait, mine *tailRead) {
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
	if es := batchFrom(b.entries, next, maxEntries, maxBytes); es != nil {
		return es, nil, nil
	}
	switch {
	case b.reading == nil:
		b.reading = &tailRead{next: next, done: make(chan struct{})}
		return nil, nil, b.reading
	case b.reading.next == next:
		return nil, b.reading, nil
	}
	return nil, nil, nil // another index is being read: read it alone
}

// from is the part of the read's batch from next on (batchFrom), once
// done is closed; nil if the read found nothing there (or failed): the
// caller then takes again.
func (r *tailRead) from(next uint64, maxEntries, maxBytes int) []wal.Entry {
	return batchFrom(r.entries, next, maxEntries, maxBytes)
}

// put ends the read take gave the caller (mine, if not nil) with the
// batch st's log returned from next (possibly none), waking the streams
// waiting for it, even if st's record was replaced meanwhile. The batch
// is held if it ends at or after the held one (a stream catching up from
// further back does not displace the tip).
func (t *tailBatches) put(st *store.Store, mine *tailRead, batch []wal.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[st.Name()]
	if b != nil && b.st == st {
		if len(batch) > 0 && !olderBatch(b.entries, batch) {
			b.entries = batch
		}
		if b.reading == mine {
			b.reading = nil
		}
	}
	if mine != nil {
		mine.entries = batch
		close(mine.done)
	}
}

// batchFrom is the part of batch (consecutive entries) from next on, at
// most maxEntries, ending once maxBytes of entry bodies are gathered (at
// least one entry), or nil if batch does not hold next. The part cannot
// be appended to over batch.
func batchFrom(batch []wal.Entry, next uint64, maxEntries, maxBytes int) []wal.Entry {
	if len(batch) == 0 || next < batch[0].Index || next > batch[len(batch)-1].Index {
		return nil
	}
	es := batch[next-batch[0].Index:]
	n, size := 0, 0
	for n < len(es) && n < maxEntries && (n == 0 || size < maxBytes) {
		size += es[n].BodySize()
		n++
	}
	return es[:n:n]
}

// olderBatch reports whether batch (not empty) ends before held.
func olderBatch(held, batch []wal.Entry) bool {
	return len(held) > 0 && batch[len(batch)-1].Index < held[len(held)-1].Index
}
