package watch

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// Limits are what the watch streams of a process may use, all databases
// together: connections and CPU are the process's. A zero field means its
// default; EnsureDefaults fills them and Validate rejects the rest.
type Limits struct {
	// MaxWatchers is the most watch subscriptions served at once, catching
	// up or live; more fail with ErrTooManyWatchers. Keep it below the
	// HTTP connection cap so that watchers never take every connection
	// from readers. Default 10,000.
	MaxWatchers int
	// WriteRate, WriteBurst and WriteConcurrency are the write budget of
	// all watch streams: a stream writes (changes, progress lines) only
	// during a turn, at most WriteRate turns per second, WriteBurst at
	// once after a pause, and WriteConcurrency under way at a time. It
	// waits for its turn and then writes everything that arrived
	// meanwhile, so a storm costs delivery delay (about watchers /
	// WriteRate seconds), not CPU taken from readers. Defaults: 2,500/s
	// per CPU (GOMAXPROCS), 32, and one turn at a time per 4 CPUs (at
	// least one).
	WriteRate        float64
	WriteBurst       int
	WriteConcurrency int
}

// DefaultLimits returns every default.
func DefaultLimits() Limits {
	cpus := runtime.GOMAXPROCS(0)
	return Limits{
		MaxWatchers:      10_000,
		WriteRate:        2_500 * float64(cpus),
		WriteBurst:       32,
		WriteConcurrency: max(1, cpus/4),
	}
}

// EnsureDefaults sets every zero field to its default.
func (l *Limits) EnsureDefaults() {
	d := DefaultLimits()
	if l.MaxWatchers == 0 {
		l.MaxWatchers = d.MaxWatchers
	}
	if l.WriteRate == 0 {
		l.WriteRate = d.WriteRate
	}
	if l.WriteBurst == 0 {
		l.WriteBurst = d.WriteBurst
	}
	if l.WriteConcurrency == 0 {
		l.WriteConcurrency = d.WriteConcurrency
	}
}

// Validate reports every field the budget cannot work with. It expects
// defaults to have been applied.
func (l *Limits) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("watch limits: "+format, args...))
		}
	}
	check(l.MaxWatchers >= 1, "MaxWatchers %d must be at least 1", l.MaxWatchers)
	check(l.WriteRate > 0, "WriteRate %v must be positive", l.WriteRate)
	check(l.WriteBurst >= 1, "WriteBurst %d must be at least 1", l.WriteBurst)
	check(l.WriteConcurrency >= 1, "WriteConcurrency %d must be at least 1", l.WriteConcurrency)
	return errors.Join(errs...)
}

// Budget enforces Limits for every hub sharing it (Config.Budget): the
// count of subscriptions and the write turns.
type Budget struct {
	limits Limits
	turns  *turns

	mu struct {
		sync.Mutex
		watchers int
	}
}

// NewBudget returns a budget of l. Zero fields take their defaults;
// NewBudget panics if l is invalid after that.
func NewBudget(l Limits) *Budget {
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return &Budget{limits: l, turns: newTurns(l.WriteConcurrency, l.WriteRate, l.WriteBurst)}
}

// Limits returns the limits the budget enforces (defaults filled in).
func (b *Budget) Limits() Limits { return b.limits }

// admit counts one more subscription, or fails with ErrTooManyWatchers.
func (b *Budget) admit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.watchers >= b.limits.MaxWatchers {
		refusedTotal.Inc()
		return fmt.Errorf("%w (limit %d)", ErrTooManyWatchers, b.limits.MaxWatchers)
	}
	b.mu.watchers++
	return nil
}

// leave counts one subscription less.
func (b *Budget) leave() {
	b.mu.Lock()
	b.mu.watchers--
	b.mu.Unlock()
}
