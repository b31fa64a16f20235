package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/quicksilver-kv/qs/client"
)

// State is what a bridge stores under its state key, as JSON.
type State struct {
	// Source names what the bridge copies ("postgres public.records slot
	// qs_records"); a bridge refuses a state key written for another source.
	Source string `json:"source"`
	// Position is the source's position that qs holds every change up to
	// and including (an LSN "0/16B3748", an etcd revision "42").
	Position string `json:"position"`
	// Copied is true once the initial copy is complete.
	Copied bool `json:"copied"`
}

// ErrStateConflict says the state key was written by someone else since
// this bridge last wrote or read it: another bridge runs for the same key.
var ErrStateConflict = errors.New("bridge: the state key changed under the bridge (another bridge writing the same key?)")

// ErrStateMoved says the state key changed before this writer's first
// write since it may have been overtaken: a write sent earlier (by a
// bridge that stopped, or by this writer when its answer was lost) landed
// after the state was read. The caller loads the state again and resumes
// from it. A second change of the key in the same situation is
// ErrStateConflict.
var ErrStateMoved = errors.New("bridge: the state key moved after it was read (an earlier write of the bridge landed late)")

// ErrOtherSource says the state key holds the position of another source.
var ErrOtherSource = errors.New("bridge: the state key belongs to another source")

// Writer writes batches of changes together with the bridge's State.
// Write may be called concurrently (the pages of a copy); the other
// methods may not.
type Writer struct {
	c     *client.Client
	key   string
	index uint64 // index of the state key as last written or read; 0: absent
	state State
	// unsettled is true while a conditional write sent earlier may still
	// land: from the start (a bridge killed before this one may have had
	// a write in flight) and after a Commit whose answer was lost, until a
	// Commit succeeds (which makes any older conditional write fail).
	unsettled bool
	mu        struct {
		sync.Mutex
		seen uint64 // highest index qs answered, for reads after a write
	}
}

// saw records that qs answered with index i.
func (w *Writer) saw(i uint64) {
	w.mu.Lock()
	w.mu.seen = max(w.mu.seen, i)
	w.mu.Unlock()
}

func (w *Writer) seen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.seen
}

// NewWriter returns a Writer storing its state under key.
func NewWriter(c *client.Client, key string) *Writer {
	return &Writer{c: c, key: key, unsettled: true}
}

// Key is the state key.
func (w *Writer) Key() string { return w.key }

// State is the state as last written or loaded.
func (w *Writer) State() State { return w.state }

// LastIndex is the highest qs index the writer has seen acknowledged.
func (w *Writer) LastIndex() uint64 { return w.seen() }

// Load reads the state key (at least as new as the writer's last write).
// ok is false when the key does not exist. A state written for another
// source is ErrOtherSource.
func (w *Writer) Load(ctx context.Context, source string) (st State, ok bool, err error) {
	v, err := w.c.Get(ctx, w.key, client.ReadOptions{MinIndex: w.seen()})
	if client.IsNotFound(err) {
		w.index, w.state = 0, State{Source: source}
		return w.state, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read state key %q: %w", w.key, err)
	}
	if err := json.Unmarshal(v.Value, &st); err != nil {
		return State{}, false, fmt.Errorf("state key %q holds no bridge state: %w", w.key, err)
	}
	if st.Source != source {
		return State{}, false, fmt.Errorf("%w: %q holds %q, this bridge copies %q", ErrOtherSource, w.key, st.Source, source)
	}
	w.index, w.state = v.Index, st
	w.saw(v.AppliedIndex)
	return st, true, nil
}

// Commit writes ops and st in one atomic batch, on condition that the
// state key is still at the index the writer knows. On any error the
// caller must Load again before the next Commit: a write whose answer was
// lost may have been applied. The condition failing is ErrStateMoved the
// first time while an earlier write may still land (see unsettled), which
// the caller resumes from, and ErrStateConflict otherwise: another writer
// is active.
func (w *Writer) Commit(ctx context.Context, ops []client.Op, st State) (uint64, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	all := make([]client.Op, 0, len(ops)+1)
	all = append(all, ops...)
	all = append(all, client.Op{Key: w.key, Value: b})
	res, err := w.c.Batch(ctx, all, []client.Cond{{Key: w.key, Index: w.index}})
	if err != nil {
		var e *client.Error
		if errors.As(err, &e) {
			w.saw(e.AppliedIndex)
			if e.Code == "condition_failed" {
				if w.unsettled {
					w.unsettled = false
					return 0, fmt.Errorf("%w: %v", ErrStateMoved, err)
				}
				return 0, fmt.Errorf("%w: %v", ErrStateConflict, err)
			}
			if e.Status >= 400 && e.Status < 500 && e.Status != 408 && e.Status != 429 {
				return 0, err // refused: nothing was applied
			}
		}
		w.unsettled = true // the write may still land
		return 0, err
	}
	w.index, w.state, w.unsettled = res.Index, st, false
	w.saw(res.Index)
	return res.Index, nil
}

// Write writes ops without the state (the pages of an initial copy, which
// the final Commit makes count).
func (w *Writer) Write(ctx context.Context, ops []client.Op) error {
	if len(ops) == 0 {
		return nil
	}
	res, err := w.c.Batch(ctx, ops, nil)
	if err != nil {
		return err
	}
	w.saw(res.Index)
	return nil
}

// Sweep deletes the keys under prefix that keep does not hold (rows gone
// from the source since an earlier copy), except the state key, in
// batches of at most batch ops. It returns how many keys it deleted.
func (w *Writer) Sweep(ctx context.Context, prefix string, keep map[string]struct{}, batch int) (int, error) {
	var ops []client.Op
	deleted := 0
	flush := func() error {
		if err := w.Write(ctx, ops); err != nil {
			return fmt.Errorf("delete keys gone from the source: %w", err)
		}
		deleted += len(ops)
		ops = ops[:0]
		return nil
	}
	start := prefix
	for {
		page, err := w.c.Scan(ctx, prefix, start, 1000, client.ReadOptions{MinIndex: w.seen()})
		if err != nil {
			return deleted, fmt.Errorf("scan %q: %w", prefix, err)
		}
		for _, it := range page.Items {
			if _, ok := keep[it.Key]; ok || it.Key == w.key {
				continue
			}
			ops = append(ops, client.Op{Key: it.Key, Delete: true})
			if len(ops) >= batch {
				if err := flush(); err != nil {
					return deleted, err
				}
			}
		}
		if page.Next == nil {
			break
		}
		start = *page.Next
	}
	return deleted, flush()
}

// Get reads the current value of key, at least as new as the writer's
// last write; nil when absent.
func (w *Writer) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := w.c.Get(ctx, key, client.ReadOptions{MinIndex: w.seen()})
	if client.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return v.Value, nil
}

// Keys lists the keys under prefix, except the state key, at least as new
// as the writer's last write.
func (w *Writer) Keys(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	start := prefix
	for {
		page, err := w.c.Scan(ctx, prefix, start, 1000, client.ReadOptions{MinIndex: w.seen()})
		if err != nil {
			return nil, fmt.Errorf("scan %q: %w", prefix, err)
		}
		for _, it := range page.Items {
			if it.Key != w.key {
				out = append(out, it.Key)
			}
		}
		if page.Next == nil {
			return out, nil
		}
		start = *page.Next
	}
}
