package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Errors of the watch hub. A from index older than the retained log is
// reported with store.ErrLogTruncated (wrapped); test it with errors.Is.
var (
	// ErrSlow: the subscriber did not keep up and its buffer overflowed.
	// Changes up to the last one it received were delivered in order; it
	// may resume from that index.
	ErrSlow = errors.New("qs: watcher too slow: its buffer overflowed; resume from the last index received")
	// ErrTooManyWatchers: the process already serves Limits.MaxWatchers.
	ErrTooManyWatchers = errors.New("qs: too many watchers on this node")
	// ErrClosed: the hub stopped (server shutdown).
	ErrClosed = errors.New("qs: watch hub closed")
)

// Event is one change: a key set to a value, or deleted. Key and Value
// are shared between subscribers and must not be modified.
type Event struct {
	Index   uint64
	Time    int64 // the entry's commit time (root clock), Unix nanoseconds
	Key     []byte
	Value   []byte
	Deleted bool
}

// position is how far the hub has fanned out: every entry through index.
type position struct {
	index uint64
	time  int64
}

// Hub follows the log of one store and fans its changes out to
// subscribers. One goroutine (Run) reads each entry once and appends each
// prefix's changes once to that prefix's feed; subscribers read the feeds
// (or, when behind, the log) on their own goroutines, and write to their
// watchers in turns (the hub's write budget).
type Hub struct {
	st     *store.Store
	cfg    Config
	log    *slog.Logger
	budget *Budget
	// ownBudget: cfg.Budget was nil; Run runs the hub's own budget.
	ownBudget bool
	// metrics is where the hub counts: cfg.Metrics, else its budget's.
	metrics *Metrics

	watchers prometheus.Gauge
	prefixes prometheus.Gauge
	lag      prometheus.Gauge
	read     prometheus.Counter // entries read from the log and fanned out
	skipped  prometheus.Counter // entries passed without reading (skipIdle)
	// readIdle: read and fan out every entry even with no live
	// subscriber (tests and benchmarks compare with it).
	readIdle bool

	// pos is stored under mu, after the batch it covers was appended to
	// every feed, so that a subscriber that loads pos and then finds its
	// feed consumed has received everything through pos.
	pos  atomic.Pointer[position]
	done chan struct{} // closed when the hub stops

	mu struct {
		sync.Mutex
		closed bool
		feeds  *feedIndex // live subscribers' feeds by prefix
		match  []*feed    // fanOut's scratch
	}
}

// NewHub returns the hub of st, positioned at its applied index. Zero
// fields of cfg take their defaults; NewHub panics if cfg is invalid after
// that. A nil log discards records. Call Run to start it.
func NewHub(st *store.Store, cfg Config, log *slog.Logger) *Hub {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{st: st, cfg: cfg, log: log, budget: cfg.Budget, metrics: cfg.Metrics, done: make(chan struct{})}
	if h.budget == nil {
		h.budget = NewBudget(Limits{}, h.metrics)
		h.ownBudget = true
	}
	if h.metrics == nil {
		h.metrics = h.budget.metrics
	}
	h.watchers = h.metrics.watchers.WithLabelValues(st.Name())
	h.prefixes = h.metrics.prefixes.WithLabelValues(st.Name())
	h.lag = h.metrics.hubLag.WithLabelValues(st.Name())
	h.read = h.metrics.hubRead.WithLabelValues(st.Name())
	h.skipped = h.metrics.hubSkipped.WithLabelValues(st.Name())
	h.mu.feeds = newFeedIndex()
	index, t := st.AppliedPosition()
	h.pos.Store(&position{index: index, time: t})
	return h
}

// Config returns the configuration the hub runs with (defaults filled in).
func (h *Hub) Config() Config { return h.cfg }

// Done is closed once the hub has stopped; every subscriber then fails
// with ErrClosed.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Position returns the index the hub has fanned out through and that
// entry's commit time (zero if unknown).
func (h *Hub) Position() (uint64, time.Time) {
	p := h.pos.Load()
	return p.index, unixTime(p.time)
}

// Run follows the log until ctx is done or the store closes, then stops
// every subscriber with ErrClosed. It returns nil on ctx cancellation and
// store.ErrClosed if the store closed first.
// A hub without Config.Budget runs its own budget's controller (a shared
// budget is run by its owner: Budget.Run).
func (h *Hub) Run(ctx context.Context) error {
	defer h.shutdown()
	if h.ownBudget {
		bctx, cancel := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			if err := h.budget.Run(bctx); err != nil {
				h.log.Warn("watch write budget runs at a fixed rate", "err", err)
			}
		}()
		defer func() {
			cancel()
			<-ran
		}()
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		changed := h.st.Changed()
		pos := h.pos.Load().index
		applied, _ := h.st.AppliedPosition()
		if applied <= pos {
			h.lag.Set(0)
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if !h.readIdle && h.skipIdle() {
			continue
		}
		entries, err := h.st.ReadLog(pos+1, h.cfg.ReadBatchEntries, h.cfg.ReadBatchBytes)
		switch {
		case errors.Is(err, store.ErrClosed):
			return err
		case errors.Is(err, store.ErrLogTruncated):
			h.skipTruncated(err)
			continue
		case err == nil && (len(entries) == 0 || entries[0].Index != pos+1):
			// Cannot happen: ReadLog returns from pos+1 on, up to applied.
			err = fmt.Errorf("log read from %d returned no entries (applied %d)", pos+1, applied)
		}
		if err != nil {
			h.log.Warn("watch hub cannot read the log; retrying", "db", h.st.Name(), "from", pos+1, "err", err)
			select {
			case <-time.After(h.cfg.RetryInterval):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		h.fanOut(entries)
		h.read.Add(float64(len(entries)))
		last := entries[len(entries)-1].Index
		if a := h.st.AppliedIndex(); a > last {
			h.lag.Set(float64(a - last))
		} else {
			h.lag.Set(0)
		}
	}
}

// skipIdle moves the hub to the store's applied position without reading
// the log if no subscriber is live (no feed): nobody would receive those
// changes. It reports whether it did. A subscriber that arrives later
// from an index before the new position reads the log itself until it
// reaches it (Sub.catchUp), as it does whenever the hub is ahead; one
// from the applied index joins at once. Checked and moved under the lock
// that joining takes, so no subscriber joins a feed the hub skipped past.
func (h *Hub) skipIdle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.feeds.len() > 0 {
		return false
	}
	index, t := h.st.AppliedPosition()
	p := h.pos.Load()
	if index <= p.index {
		return false
	}
	h.skipped.Add(float64(index - p.index))
	h.pos.Store(&position{index: index, time: t})
	return true
}

// skipTruncated handles a hub so far behind that its next entry was
// dropped from the log: live subscribers missed changes, so each feed ends
// with the error (they must re-read), and the hub resumes at the log start.
func (h *Hub) skipTruncated(err error) {
	lr, lerr := h.st.LogRange()
	if lerr != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cut := fmt.Errorf("watch: %w: re-read the data (scan) and watch from the scan's index", err)
	for _, f := range h.mu.feeds.byPrefix {
		f.appendErr(cut)
	}
	p := h.pos.Load()
	h.pos.Store(&position{index: lr.First - 1, time: p.time})
	h.log.Warn("watch hub fell behind the retained log; cut its watchers", "db", h.st.Name(), "resume_at", lr.First)
}

// fanOut appends the changes of entries (consecutive, after pos) to the
// feed of every prefix they match, as one batch per feed: once per
// prefix, whatever the number of subscribers, and without waiting for any
// of them. Its work is one feed lookup per change and distinct prefix
// length.
func (h *Hub) fanOut(entries []wal.Entry) {
	last := &entries[len(entries)-1]
	h.mu.Lock()
	defer h.mu.Unlock()
	var touched []*feed
	for i := range entries {
		e := &entries[i]
		if e.Kind != wal.KindData {
			continue
		}
		for _, op := range e.Ops {
			h.mu.match = h.mu.feeds.appendMatching(h.mu.match[:0], op.Key)
			for _, f := range h.mu.match {
				if len(f.pending) == 0 {
					touched = append(touched, f)
				}
				f.pending = append(f.pending, Event{Index: e.Index, Time: e.Time, Key: op.Key, Value: op.Value, Deleted: op.Type == wal.OpDelete})
			}
		}
	}
	for _, f := range touched {
		f.append(newBatch(f.pending))
		f.pending = nil // the batch owns it
	}
	clear(h.mu.match)
	h.pos.Store(&position{index: last.Index, time: last.Time})
}

// appendMatching appends the changes of entries under prefix to dst (a
// catching-up subscriber's filter). Heartbeats carry no changes.
func appendMatching(dst []Event, entries []wal.Entry, prefix []byte) []Event {
	for i := range entries {
		e := &entries[i]
		if e.Kind != wal.KindData {
			continue
		}
		for _, op := range e.Ops {
			if !bytes.HasPrefix(op.Key, prefix) {
				continue
			}
			dst = append(dst, Event{Index: e.Index, Time: e.Time, Key: op.Key, Value: op.Value, Deleted: op.Type == wal.OpDelete})
		}
	}
	return dst
}

// Subscribe starts a subscription to the changes under prefix after index
// from (from = the applied index: only future changes). A from older than
// the retained log fails with an error wrapping store.ErrLogTruncated: the
// caller must re-read the data and watch from the read's index. The
// subscriber must be closed.
func (h *Hub) Subscribe(prefix []byte, from uint64) (*Sub, error) {
	s := &Sub{
		h:      h,
		prefix: bytes.Clone(prefix),
		next:   from + 1,
		last:   from,
	}
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if err := h.budget.admit(); err != nil {
		h.mu.Unlock()
		return nil, err
	}
	h.watchers.Inc()
	s.live = h.tryJoinLocked(s)
	h.mu.Unlock()
	if !s.live {
		lr, err := h.st.LogRange()
		if err == nil && from+1 < lr.First {
			err = fmt.Errorf("%w: watch from index %d, but the log starts at %d: re-read the data (scan) and watch from the scan's index",
				store.ErrLogTruncated, from, lr.First)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// tryJoinLocked makes s a reader of its prefix's feed if the hub has not
// fanned out anything s has yet to read from the log. It starts at the
// feed's tail; the hub's position may be behind what s read (after): s
// skips those changes when they come.
func (h *Hub) tryJoinLocked(s *Sub) bool {
	p := h.pos.Load()
	if s.next-1 < p.index {
		return false
	}
	s.after = s.next - 1
	f := h.mu.feeds.get(s.prefix)
	if f == nil {
		f = newFeed(s.prefix, h.cfg.BufferBatches, h.cfg.BufferBytes)
		h.mu.feeds.add(f)
		h.prefixes.Inc()
	}
	f.subs++
	s.feed = f
	s.cursor = f.tail
	return true
}

// leaveLocked removes s from its feed; the last one out drops the feed.
func (h *Hub) leaveLocked(s *Sub) {
	f := s.feed
	if f == nil {
		return
	}
	s.feed = nil
	if f.subs--; f.subs == 0 {
		h.mu.feeds.remove(f)
		h.prefixes.Dec()
	}
}

func (h *Hub) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.closed = true
	close(h.done)
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
