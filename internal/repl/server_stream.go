package repl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// stream sends entries from next on, and Progress when idle, until ctx
// ends, a write fails or StopIndex is sent. With a head source, each batch
// is followed by the signed head of its last entry when there is one (a
// replica forwarding heads sends only entries a head covers), and each
// Progress by the signed head of the applied index. A child replica
// (cutThrough) also gets the entries this node's replica verified and is
// making durable (relay.go); other clients get only durable ones. The
// node's path goes out before the first entries and whenever it changes.
func (cn *conn) stream(ctx context.Context, st *store.Store, next, stop uint64, heads HeadSource, cutThrough bool) error {
	cfg := cn.s.cfg
	idle := time.NewTimer(cfg.ProgressInterval)
	defer idle.Stop()
	// The newest head this node holds for its applied index, at once: a
	// child that restarted, or this node after a restart (its saved head),
	// need not wait for the next idle Progress to have one.
	if err := cn.root.send(cn); err != nil {
		return err
	}
	if h, err := appliedSignedHead(heads, st); err != nil {
		return err
	} else if h != nil {
		if err := cn.send(h); err != nil {
			return err
		}
	}
	for {
		// First, and between batches: a child must learn a move above
		// it before it takes children that may be its new ancestors.
		if err := cn.path.send(cn); err != nil {
			return err
		}
		if stop > 0 && next > stop {
			return cn.send(&Done{LastIndex: stop})
		}
		// Both before reading, so no commit and no relayed batch is missed.
		changed := st.Changed()
		var rl *relay
		var relayed <-chan struct{}
		if cutThrough {
			if rl = relayOf(st); rl != nil {
				relayed = rl.changed()
			}
		}
		// Past the applied index the relay has what there is, and the log
		// at most a commit not yet published, which closes changed once it
		// is: a stream at the tip waits without reading the store. The log
		// has what the relay no longer holds.
		applied := st.AppliedIndex()
		var entries []wal.Entry
		if rl != nil && next > applied {
			entries = rl.read(next, cfg.MaxBatchEntries, cfg.MaxBatchBytes)
		}
		early := len(entries) > 0
		if !early && next <= applied {
			var err error
			entries, err = cn.readLog(ctx, st, next)
			if errors.Is(err, store.ErrLogTruncated) {
				// Retention overtook a slow client.
				cn.refuse(RefuseLogTruncated, "%v: bootstrap from a snapshot", err)
				return err
			}
			if err != nil {
				return fmt.Errorf("read log at %d: %w", next, err)
			}
		}
		if stop > 0 {
			for len(entries) > 0 && entries[len(entries)-1].Index > stop {
				entries = entries[:len(entries)-1]
			}
		}
		var head *Head
		entries, head = batchHead(heads, st.DBID(), entries)
		if len(entries) > 0 {
			if err := cn.send(&Entries{Entries: entries}); err != nil {
				return err
			}
			if head != nil {
				if err := cn.send(head); err != nil {
					return err
				}
			}
			cfg.Metrics.entriesSent.Add(float64(len(entries)))
			next = entries[len(entries)-1].Index + 1
			if early {
				rl.sent(next - 1)
				cfg.Metrics.entriesRelayed.Add(float64(len(entries)))
			}
			resetTimer(idle, cfg.ProgressInterval)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		select {
		case <-changed:
		case <-relayed:
		case <-cn.path.wait():
		case <-idle.C:
			// A stream at the tip reads nothing, which would have told it
			// its store closed: a closed store ends the stream.
			if st.Closed() {
				return store.ErrClosed
			}
			p := &Progress{AppliedIndex: st.AppliedIndex()}
			if t := st.AppliedTime(); !t.IsZero() {
				p.AppliedTime = t.UnixNano()
			}
			if err := cn.send(p); err != nil {
				return err
			}
			if err := cn.root.send(cn); err != nil {
				return err
			}
			if h, err := appliedSignedHead(heads, st); err != nil {
				return err
			} else if h != nil {
				if err := cn.send(h); err != nil {
					return err
				}
			}
			idle.Reset(cfg.ProgressInterval)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readLog reads st's log from next, at most st's applied index, or takes
// the batch another stream at the same position read (tailBatches).
func (cn *conn) readLog(ctx context.Context, st *store.Store, next uint64) ([]wal.Entry, error) {
	cfg := cn.s.cfg
	for {
		entries, wait, mine := cn.s.tails.take(st, next, cfg.MaxBatchEntries, cfg.MaxBatchBytes)
		if entries != nil {
			return entries, nil
		}
		if wait == nil {
			if testHookReadLog != nil {
				testHookReadLog(st, next)
			}
			entries, err := st.ReadLog(next, cfg.MaxBatchEntries, cfg.MaxBatchBytes)
			cn.s.tails.put(st, mine, entries)
			return entries, err
		}
		select {
		case <-wait.done:
			if entries := wait.from(next, cfg.MaxBatchEntries, cfg.MaxBatchBytes); entries != nil {
				return entries, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// testHookReadLog, when set by a test, runs before a stream reads st's
// log from next.
var testHookReadLog func(st *store.Store, next uint64)

// batchHead trims a batch to what heads covers and returns the signed head
// of its last entry, if any: the root signs it; a replica forwarding heads
// ends the batch at the first head it holds at or after the batch's start
// (nothing if it holds none yet).
func batchHead(heads HeadSource, db store.DBID, entries []wal.Entry) ([]wal.Entry, *Head) {
	if len(entries) == 0 {
		return entries, nil
	}
	last := &entries[len(entries)-1]
	switch {
	case heads.Signer != nil:
		return entries, &Head{heads.Signer.Sign(db, last.Index, last.Hash)}
	case heads.Book != nil:
		h, ok := heads.Book.Covering(entries[0].Index)
		if !ok {
			return nil, nil
		}
		if h.Index < last.Index {
			entries = entries[:h.Index-entries[0].Index+1]
		}
		if h.Index == entries[len(entries)-1].Index {
			return entries, &Head{h}
		}
		return entries, nil
	}
	return entries, nil
}

// appliedSignedHead is the signed head of st's applied index, if heads
// has one.
func appliedSignedHead(heads HeadSource, st *store.Store) (*Head, error) {
	switch {
	case heads.Signer != nil:
		h, err := st.Head()
		if err != nil || h.Index == 0 {
			return nil, err
		}
		return &Head{heads.Signer.Sign(st.DBID(), h.Index, h.Hash)}, nil
	case heads.Book != nil:
		if h, ok := heads.Book.Latest(); ok && h.Index <= st.AppliedIndex() {
			return &Head{h}, nil
		}
	}
	return nil, nil
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}
