package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Status is what a Replica is doing.
type Status int

const (
	StatusDisconnected Status = iota
	StatusConnecting
	StatusStreaming
	StatusCatchingUp // streaming, behind the source's last reported index
	StatusBootstrapping
	// StatusForked: the replica's log forked from its source's (the
	// entry after its applied index does not chain from its applied
	// hash, or the root signed another hash for its applied index). It
	// applies nothing more; qs repair re-bootstraps it.
	StatusForked
)

func (s Status) String() string {
	switch s {
	case StatusConnecting:
		return "connecting"
	case StatusStreaming:
		return "streaming"
	case StatusCatchingUp:
		return "catching_up"
	case StatusBootstrapping:
		return "bootstrapping"
	case StatusForked:
		return "forked"
	}
	return "disconnected"
}

// ReplicaState is a snapshot of a Replica for status pages and tests.
type ReplicaState struct {
	Status       Status
	Source       string        // current (or last) source address
	LastError    error         // last session error, nil if none yet
	AppliedIndex uint64        // the store's applied index
	Lag          time.Duration // now − root time of the last applied entry (without one: since NewReplica); below 0, unknown: that entry is dated in this node's future
	ServerIndex  uint64        // the source's applied index, last reported
	Sessions     int           // connection attempts so far
	Bootstraps   int           // bootstraps begun since NewReplica
	Bootstrap    BootstrapProgress
	// SignedIndex is the index of the newest signed head verified (0:
	// none yet, or no Verifier).
	SignedIndex uint64
	// RootHTTP are the HTTP addresses where the database's writes are
	// accepted, as the last source that told them said (protocol_root.go);
	// none while no source told them.
	RootHTTP []string
	// SourcePath is the path the current source sent last on this
	// connection (protocol_path.go): its own node id first. Nil while
	// not streaming, or when the source sent none.
	SourcePath []uint64
}

// Replica keeps one store replicating from an ordered list of sources.
type Replica struct {
	cfg ReplicaConfig
	st  *store.Store
	log *slog.Logger

	running sync.Mutex // held by Run
	started time.Time  // when the replica was made: the age of an empty one
	relay   *relay     // set by Run
	legacy  sync.Map   // sources that refused a version: address → legacySource
	book    headsig.Book
	// The head file (headfile.go): the index saved, and when. Used by
	// the session goroutine of Run only, and before it by NewReplica.
	saved   uint64
	savedAt time.Time

	mu struct {
		sync.Mutex
		state ReplicaState
		// cancel ends the current attempt; moved says Reconnect did.
		cancel context.CancelFunc
		moved  bool
		// pathChanged is closed (and replaced) when state.SourcePath
		// changes.
		pathChanged chan struct{}
	}
}

// NewReplica returns a replica of st; it does nothing until Run.
func NewReplica(cfg ReplicaConfig, st *store.Store, log *slog.Logger) (*Replica, error) {
	cfg.EnsureDefaults(st)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st.DBID().IsZero() {
		return nil, errors.New("repl: store has no database id")
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Replica{cfg: cfg, st: st, started: time.Now(), log: log.With("component", "repl-client", "db", cfg.Database)}
	r.loadHead()
	cfg.Metrics.rootKnown.WithLabelValues(cfg.Database).Set(0)
	return r, nil
}

// Book holds the signed heads this replica verified, for a server to
// forward (HeadSource.Book).
func (r *Replica) Book() *headsig.Book { return &r.book }

// State returns the replica's current state.
func (r *Replica) State() ReplicaState {
	r.mu.Lock()
	s := r.mu.state
	r.mu.Unlock()
	s.AppliedIndex = r.st.AppliedIndex()
	s.Lag = r.lag()
	if s.Status == StatusStreaming && s.AppliedIndex < s.ServerIndex {
		s.Status = StatusCatchingUp
	}
	return s
}

func (r *Replica) lag() time.Duration {
	t := r.st.AppliedTime()
	if t.IsZero() {
		// Nothing applied: the replica holds none of the data, which is
		// as stale as it has been waiting for it, not fresh.
		return time.Since(r.started)
	}
	return time.Since(t)
}

func (r *Replica) update(fn func(s *ReplicaState)) {
	r.mu.Lock()
	fn(&r.mu.state)
	r.mu.Unlock()
}

// SourcePath returns the path the current source sent last (its own id
// first; nil: none on the current connection), and a channel closed when
// that changes.
func (r *Replica) SourcePath() ([]uint64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.pathChanged == nil {
		r.mu.pathChanged = make(chan struct{})
	}
	return r.mu.state.SourcePath, r.mu.pathChanged
}

// setSourcePath records the source's path p; nil when the connection
// ends.
func (r *Replica) setSourcePath(p []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Equal(p, r.mu.state.SourcePath) {
		return
	}
	r.mu.state.SourcePath = p
	if r.mu.pathChanged != nil {
		close(r.mu.pathChanged)
		r.mu.pathChanged = nil
	}
}

func (r *Replica) export() {
	r.cfg.Metrics.lag.WithLabelValues(r.cfg.Database).Set(r.lag().Seconds())
	r.cfg.Metrics.appliedIndex.WithLabelValues(r.cfg.Database).Set(float64(r.st.AppliedIndex()))
}

// Run replicates until ctx ends, then returns nil. The store must stay open
// until Run returns. Run may be called once at a time.
func (r *Replica) Run(ctx context.Context) error {
	if !r.running.TryLock() {
		return errors.New("repl: replica already running")
	}
	defer r.running.Unlock()
	defer r.saveHead(true)
	db, ms := r.cfg.Database, r.cfg.Metrics
	ms.forked.WithLabelValues(db).Set(0)
	// Children streaming from this store get each verified batch while
	// the store makes it durable.
	rl := newRelay()
	relays.Store(r.st, rl)
	defer relays.CompareAndDelete(r.st, rl)
	r.relay = rl
	// Lag grows while no entry arrives: export it on a clock, not only on
	// applies. The goroutine is owned by Run and waited for below.
	var wg sync.WaitGroup
	lctx, stopLag := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			r.export()
			select {
			case <-t.C:
			case <-lctx.Done():
				return
			}
		}
	}()
	defer func() {
		stopLag()
		wg.Wait()
		ms.streaming.WithLabelValues(db).Set(0)
		r.update(func(s *ReplicaState) { s.Status = StatusDisconnected })
	}()

	backoff := r.cfg.BackoffMin
	plan := newAttemptPlan()
	mismatches := 0 // sessions in a row whose first entry did not chain from our head
	var sources []string
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		if r.cfg.Finder != nil {
			found := r.cfg.Finder.Sources()
			if !slices.Equal(found, sources) {
				plan = plan.sourcesChanged()
				sources = found
			}
		} else {
			sources = r.cfg.Sources
		}
		if len(sources) == 0 {
			// No member serves the database yet (sources found through
			// the overlay): ask again after the backoff.
			r.update(func(s *ReplicaState) { s.Status, s.LastError = StatusDisconnected, errNoSource })
			if !r.pause(ctx, &backoff) {
				return nil
			}
			continue
		}
		src := sources[plan.next%len(sources)]
		if attempt > 0 {
			ms.reconnects.WithLabelValues(db).Inc()
		}
		sctx, cancel := context.WithCancel(ctx)
		r.update(func(s *ReplicaState) {
			s.Status, s.Source, s.Sessions = StatusConnecting, src, s.Sessions+1
			r.mu.cancel, r.mu.moved = cancel, false
		})
		var progressed bool
		var err error
		if plan.bootstrapping {
			progressed, err = r.bootstrap(sctx, src, 0)
		} else {
			progressed, err = r.session(sctx, src)
		}
		var moved bool
		r.update(func(s *ReplicaState) {
			s.Status = StatusDisconnected
			moved, r.mu.cancel = r.mu.moved, nil
		})
		r.setSourcePath(nil)
		cancel()
		ms.streaming.WithLabelValues(db).Set(0)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errResumeMismatch) {
			mismatches++
			if mismatches >= forkConfirmations {
				err = fmt.Errorf("%w (%d sessions in a row): %v", ErrForked, mismatches, err)
			}
		} else if progressed {
			mismatches = 0
		}
		if errors.Is(err, ErrForked) {
			r.forked(ctx, src, err)
			return nil
		}
		var refused *RefusedError
		o := outcomeFailed
		switch {
		case moved:
			o = outcomeMoved
		case err == nil:
			o = outcomeOK
		case errors.Is(err, errNeedBootstrap):
			o = outcomeNeedBootstrap
		case errors.As(err, &refused) && refused.Code == RefuseLogTruncated:
			o = outcomeLogTruncated
		case errors.As(err, &refused) && refused.Code == RefuseAhead:
			o = outcomeAhead
		}
		var step attemptStep
		plan, step = plan.after(o, progressed, len(sources))
		if step.resetBackoff {
			backoff = r.cfg.BackoffMin
		}
		switch {
		case o == outcomeMoved:
			r.log.Info("reconnecting to another source", "source", src)
			continue
		case step.beginBootstrap:
			src = sources[plan.next%len(sources)]
			r.log.Warn("replica must bootstrap from a snapshot", "source", src, "reason", err)
			ms.errors.WithLabelValues(db, kindBootstrap).Inc()
			r.update(func(s *ReplicaState) { s.LastError, s.Bootstraps = err, s.Bootstraps+1 })
			continue
		case step.now:
			r.update(func(s *ReplicaState) { s.LastError = nil })
			continue
		}
		if err == nil {
			err = fmt.Errorf("%w: source ended the stream", ErrMalformed)
		}
		if r.cfg.Finder != nil && o == outcomeFailed {
			r.cfg.Finder.Failed(src)
		}
		kind := errorKind(err)
		ms.errors.WithLabelValues(db, kind).Inc()
		r.update(func(s *ReplicaState) { s.LastError = err })
		switch {
		case errors.As(err, &refused):
			ms.clientRefused.WithLabelValues(db, refused.Code.String()).Inc()
			lvl := slog.LevelWarn
			if refused.Code == RefuseWrongDBID || refused.Code == RefuseSelf || refused.Code == RefuseLogTruncated {
				lvl = slog.LevelError
			}
			r.log.Log(ctx, lvl, "replication source refused us", "source", src, "code", refused.Code.String(), "reason", refused.Reason)
		default:
			r.log.Warn("replication session ended; trying the next source", "source", src, "kind", kind, "err", err)
		}
		if !r.pause(ctx, &backoff) {
			return nil
		}
	}
}

// ErrForked: the replica's log and its source's differ at or before the
// replica's applied index: they forked.
var ErrForked = errors.New("qs: replica log forked from its source")

// forked records that the replica's log forked, and waits for ctx: a
// forked replica applies nothing more (any entry would continue another
// log) until it is repaired (qs repair re-bootstraps it). It keeps
// serving what it has unless the node answers /healthz 503 for it.
func (r *Replica) forked(ctx context.Context, src string, err error) {
	db, ms := r.cfg.Database, r.cfg.Metrics
	ms.errors.WithLabelValues(db, kindForked).Inc()
	ms.forked.WithLabelValues(db).Set(1)
	r.update(func(s *ReplicaState) { s.Status, s.LastError = StatusForked, err })
	r.log.Error("replica log forked from its source: applying nothing more; run qs repair to bootstrap it again (the data is kept aside)",
		"source", src, "applied_index", r.st.AppliedIndex(), "err", err)
	<-ctx.Done()
}

// errResumeMismatch: a session's first entry did not chain from the
// replica's applied head. Damage in transit or a lying source can do that
// once; forkConfirmations sessions in a row, with nothing applied between
// them, mean the logs forked.
var errResumeMismatch = errors.New("qs: source's log does not continue ours")

// forkConfirmations is how many sessions in a row must meet
// errResumeMismatch before the replica says it forked.
const forkConfirmations = 2

// atResumePoint reports whether the chain of entries breaks at its first
// entry, the one after the applied head (index, hash), and the rest of
// the batch chains from that entry: the source's log goes on, from
// another entry than ours.
func atResumePoint(index uint64, hash wal.Hash, entries []wal.Entry) bool {
	if len(entries) == 0 || entries[0].Index != index+1 {
		return false
	}
	v := wal.Verifier{Index: index, Hash: hash}
	if v.Check(&entries[0]) == nil {
		return false
	}
	v = wal.Verifier{Index: entries[0].Index, Hash: entries[0].Hash}
	for i := 1; i < len(entries); i++ {
		if v.Check(&entries[i]) != nil {
			return false
		}
	}
	return true
}

// errNoSource: the overlay knows no member to replicate from yet.
var errNoSource = errors.New("qs: no replication source found yet")

// pause waits the jittered backoff, full jitter in [backoff/2, backoff),
// and doubles it up to BackoffMax. It reports false if ctx ended.
func (r *Replica) pause(ctx context.Context, backoff *time.Duration) bool {
	d := *backoff/2 + rand.N(*backoff/2+1)
	*backoff = min(2**backoff, r.cfg.BackoffMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Reconnect ends the current session or bootstrap attempt, if any; the
// replica starts again at once from the first of its sources (asking its
// SourceFinder again). The stores's own clients are not affected.
func (r *Replica) Reconnect() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.cancel != nil {
		r.mu.moved = true
		r.mu.cancel()
	}
}
