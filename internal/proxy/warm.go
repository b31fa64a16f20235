package proxy

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// The warm-up of a proxy's shard budget. An owner fills the budget of its
// own shard from its fetches and from the prefetch stream, so a key no
// node of the data centre has read yet is in no cache: its first read
// anywhere in the data centre goes to the replicas. The warmer fetches,
// in the background, the values of the owner's shard it holds neither on
// disk nor in the budget, from the next tier (the relays, then the
// replicas), until the budget is full: after it, a first read of such a
// key in the data centre is an L2 hit. It is bounded (batches of at most
// WarmConfig.Batch keys, sized to the room left at the mean size of the
// values held, so a pass stops at a full budget having evicted at most a
// few values) and paced (at most WarmConfig.Rate values a
// second), and passes again every WarmConfig.Interval for the versions
// written since. Its fetches are quiet (Pool.Quiet): a relay answers
// them without publishing the values on its prefetch stream, which is
// for values someone read. It never serves a value: the store checks
// each against its record before holding it.

// WarmStore is the part of a proxy store the warmer uses
// (store.Store).
type WarmStore interface {
	ShardWarmItems(from []byte, n, scan int) (items []store.FetchItem, at uint64, next []byte, err error)
	PutShardWarm(items []store.FetchItem) (held, bad int)
	ShardRoom() (bytes, budget, values int64)
}

// WarmConfig configures a shard warmer.
type WarmConfig struct {
	Database string
	Store    WarmStore
	// Next fetches the values: the tier after L2 (the pool of relays
	// and replicas), since a node owns its shard's keys itself. Give it
	// the pool's quiet fetcher (Pool.Quiet), so that the relays do not
	// publish what nobody read to every proxy of the data centre.
	Next store.Fetcher
	// Rate is the most values fetched a second. Default
	// DefaultWarmRate.
	Rate int
	// Batch is the most keys of one fetch (default 256); Scan the most
	// keys looked at to gather one (default 16384).
	Batch, Scan int
	// Interval is the wait between passes over the keys. Default 30s.
	Interval time.Duration
	// FetchTimeout bounds one fetch. Default 5s.
	FetchTimeout time.Duration
	// Retry is the wait after a failed fetch. Default 1s.
	Retry time.Duration
	// Ready, when set, reports whether the store has caught up with its
	// source: a pass starts only then (polled every Poll, default
	// 200ms), since the records a proxy still has to apply are the keys
	// it would warm.
	Ready func() bool
	Poll  time.Duration
	// Metrics are the collectors the warmer counts in, shared with the
	// process's pools. Default: a private NewMetrics().
	Metrics *Metrics
}

// DefaultWarmRate is the values a second a warmer fetches by default:
// about 5 MB/s of 1 KiB values, a small share of a data centre link.
const DefaultWarmRate = 5000

// ShardWarmer fills a proxy's shard budget in the background.
type ShardWarmer struct {
	cfg    WarmConfig
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// StartShardWarmer starts warming; Close stops it.
func StartShardWarmer(cfg WarmConfig, log *slog.Logger) (*ShardWarmer, error) {
	if cfg.Store == nil || cfg.Next == nil {
		return nil, errors.New("proxy: shard warmer: no store or no next tier")
	}
	if cfg.Rate < 0 || cfg.Batch < 0 || cfg.Scan < 0 || cfg.Interval < 0 || cfg.FetchTimeout < 0 || cfg.Retry < 0 || cfg.Poll < 0 {
		return nil, errors.New("proxy: shard warmer: negative setting")
	}
	cfg.Rate = cmp.Or(cfg.Rate, DefaultWarmRate)
	cfg.Batch = min(cmp.Or(cfg.Batch, 256), cfg.Rate)
	cfg.Scan = cmp.Or(cfg.Scan, 16384)
	cfg.Interval = cmp.Or(cfg.Interval, 30*time.Second)
	cfg.FetchTimeout = cmp.Or(cfg.FetchTimeout, 5*time.Second)
	cfg.Retry = cmp.Or(cfg.Retry, time.Second)
	cfg.Poll = cmp.Or(cfg.Poll, 200*time.Millisecond)
	cfg.Metrics = orNew(cfg.Metrics)
	ctx, cancel := context.WithCancel(context.Background())
	w := &ShardWarmer{cfg: cfg, log: log.With("db", cfg.Database), cancel: cancel, done: make(chan struct{})}
	go func() { defer close(w.done); w.run(ctx) }()
	return w, nil
}

// Close stops the warmer and waits for it.
func (w *ShardWarmer) Close() {
	w.cancel()
	<-w.done
}

func (w *ShardWarmer) run(ctx context.Context) {
	for ctx.Err() == nil {
		for w.cfg.Ready != nil && !w.cfg.Ready() && ctx.Err() == nil {
			sleep(ctx, w.cfg.Poll)
		}
		w.pass(ctx)
		sleep(ctx, w.cfg.Interval)
	}
}

// pass walks the keys once, fetching those of the shard not held, until
// the budget is full or the keys are done.
func (w *ShardWarmer) pass(ctx context.Context) {
	var from []byte
	for ctx.Err() == nil {
		n := min(warmBatch(w.cfg.Store.ShardRoom()), w.cfg.Batch)
		if n == 0 {
			w.count("full", 1)
			return
		}
		items, at, next, err := w.cfg.Store.ShardWarmItems(from, n, w.cfg.Scan)
		if err != nil {
			w.log.Warn("shard warm-up: reading the keys failed", "err", err)
			return
		}
		if len(items) > 0 {
			fctx, cancel := context.WithTimeout(ctx, w.cfg.FetchTimeout)
			err := w.cfg.Next.Fetch(fctx, at, items)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				w.count("failed", len(items))
				w.log.Debug("shard warm-up: fetch failed", "keys", len(items), "err", err)
				sleep(ctx, w.cfg.Retry)
				continue // the same keys again
			}
			h, bad := w.cfg.Store.PutShardWarm(items)
			w.count("held", h)
			w.count("bad", bad)
			w.count("not_held", len(items)-h-bad)
			sleep(ctx, warmPause(len(items), w.cfg.Rate))
		}
		if next == nil {
			w.count("done", 1)
			return
		}
		from = next
	}
}

func (w *ShardWarmer) count(result string, n int) {
	if n > 0 {
		w.cfg.Metrics.warm.WithLabelValues(w.cfg.Database, result).Add(float64(n))
	}
}

// warmBatch is how many values the next warm fetch may ask for, the
// budget holding held of budget bytes in values values: as many as fit
// in the room left at the size of the values held (warmValueGuess
// before any), none once another does not fit. Pure.
func warmBatch(held, budget, values int64) int {
	per := int64(warmValueGuess)
	if values > 0 {
		per = max(per, held/values)
	}
	if budget <= 0 || held+per > budget {
		return 0
	}
	return int(min((budget-held)/per, 1<<20))
}

// warmValueGuess is the bytes the warmer counts per value before the
// budget holds any (the budget's overhead per value and a small value).
const warmValueGuess = 512

// warmPause is the wait after fetching n values at rate values a
// second. Pure.
func warmPause(n, rate int) time.Duration {
	if rate <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second / time.Duration(rate)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
