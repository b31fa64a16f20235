package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// ReplicaConfig configures a Replica. The zero value of every field but
// Sources means its default, filled in by EnsureDefaults.
type ReplicaConfig struct {
	// Database is the name asked for in the Hello. Default: the store's name.
	Database string
	// Sources are the addresses to replicate from, in order of preference.
	// After a failure the replica moves on to the next one. Required
	// unless Finder is set.
	Sources []string
	// Finder, when set, replaces Sources: it is asked for the list before
	// every attempt, and told of each source that failed.
	Finder SourceFinder
	// ProcessID identifies this process. Default DefaultProcessID.
	ProcessID ProcessID
	// IdleTimeout: a source from which nothing arrived for this long (no
	// byte of entries or progress) is dropped. Default 30s.
	IdleTimeout time.Duration
	// DialTimeout bounds a TCP connect. Default 5s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds sending the Hello and receiving the answer.
	// Default 10s.
	HandshakeTimeout time.Duration
	// BackoffMin and BackoffMax bound the jittered, doubling pause between
	// connection attempts; a session that applied entries resets it.
	// Defaults 100ms and 5s.
	BackoffMin, BackoffMax time.Duration
	// Dial opens a connection. Default: a net.Dialer (TLS will wrap it here).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// BootstrapLock is the file whose lock allows one bootstrap per host
	// at a time. Default qs-bootstrap.lock in os.TempDir().
	BootstrapLock string
	// BootstrapMinEntries: a new replica (applied index 0) whose source
	// is more entries ahead than this bootstraps from a snapshot instead
	// of replaying the log. Default 10000; negative: only when the source
	// no longer retains the log it needs.
	BootstrapMinEntries int64
	// Report returns the report sent to the source every ReportInterval
	// (report.go), nil to skip one. Nil: no reports.
	Report func() []byte
	// ReportInterval is how often Report is sent. Default 1s.
	ReportInterval time.Duration
	// Verifier, when set, holds the cluster's public key: entries are
	// applied only once a head signed by the root vouches for them, and
	// a stream that does not verify is refused (heads.go). Nil: entries
	// are applied once their hash chain checks.
	Verifier *headsig.Verifier
	// MaxUnsignedBytes is the most entry bytes held back waiting for a
	// signed head; a source that sends more without one is dropped.
	// Default 256 MiB.
	MaxUnsignedBytes int
	// BeforeApply, when set, is called with the last index of each
	// verified batch after it is offered to the children (cut-through,
	// relay.go) and before the store applies it. Crash tests use it.
	BeforeApply func(last uint64)
	// Metrics counts what the replica does, labelled with Database; the
	// process gives all its replicas and servers the one it registered.
	// Default: a private NewMetrics(), registered nowhere.
	Metrics *Metrics
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *ReplicaConfig) EnsureDefaults(st *store.Store) *ReplicaConfig {
	if c.Database == "" && st != nil {
		c.Database = st.Name()
	}
	if c.ProcessID.IsZero() {
		c.ProcessID = DefaultProcessID
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Second
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.BootstrapLock == "" {
		c.BootstrapLock = filepath.Join(os.TempDir(), "qs-bootstrap.lock")
	}
	if c.BootstrapMinEntries == 0 {
		c.BootstrapMinEntries = 10000
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = time.Second
	}
	if c.MaxUnsignedBytes == 0 {
		c.MaxUnsignedBytes = 256 << 20
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	return c
}

// Validate reports the first invalid field.
func (c *ReplicaConfig) Validate() error {
	switch {
	case len(c.Sources) == 0 && c.Finder == nil:
		return errors.New("repl: no replication sources")
	case len(c.Database) > MaxDatabaseName:
		return fmt.Errorf("repl: database name of %d bytes over %d", len(c.Database), MaxDatabaseName)
	case c.IdleTimeout < time.Millisecond:
		return fmt.Errorf("repl: IdleTimeout %v below 1ms", c.IdleTimeout)
	case c.DialTimeout < time.Millisecond:
		return fmt.Errorf("repl: DialTimeout %v below 1ms", c.DialTimeout)
	case c.HandshakeTimeout < time.Millisecond:
		return fmt.Errorf("repl: HandshakeTimeout %v below 1ms", c.HandshakeTimeout)
	case c.BackoffMin < time.Millisecond || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("repl: backoff %v..%v invalid", c.BackoffMin, c.BackoffMax)
	case c.MaxUnsignedBytes < 1:
		return fmt.Errorf("repl: MaxUnsignedBytes %d below 1", c.MaxUnsignedBytes)
	}
	return nil
}

// SourceFinder finds a replica's sources (through the gossip overlay).
type SourceFinder interface {
	// Sources returns the addresses to try, in order of preference;
	// empty while none is known.
	Sources() []string
	// Failed reports that connecting to or streaming from addr failed,
	// or that it refused (not for want of log: that is no fault).
	Failed(addr string)
}

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

// streamError is a verification failure of received entries.
type streamError struct {
	kind string
	err  error
}

func (e *streamError) Error() string { return e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// errorKind maps a session error to the "kind" label of errors_total.
func errorKind(err error) string {
	var se *streamError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		return se.kind
	case errors.Is(err, ErrChecksum):
		return kindCRC
	case errors.Is(err, ErrMalformed):
		return kindDecode
	case errors.Is(err, ErrRefused):
		return kindRefused
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	}
	return kindIO
}

// receiver holds the stream bookkeeping of one session, free of I/O: it
// checks each received batch against the chain of everything accepted so
// far.
type receiver struct {
	v wal.Verifier
}

// check verifies a whole batch; on failure nothing of it is accepted.
func (rc *receiver) check(entries []wal.Entry) error {
	v := wal.Verifier{Index: rc.v.Index, Hash: rc.v.Hash}
	for i := range entries {
		e := &entries[i]
		if e.Index != v.Index+1 {
			return &streamError{kindGap, fmt.Errorf("qs: replication gap: entry %d after %d", e.Index, v.Index)}
		}
		if err := v.Check(e); err != nil {
			return &streamError{kindHash, fmt.Errorf("qs: replication hash mismatch: %v", err)}
		}
	}
	rc.v.Index, rc.v.Hash = v.Index, v.Hash
	return nil
}

// appliedHead returns the store's applied index and the hash of that
// entry. The store exports no accessor for the hash, so it is read from
// the log: the newest entry is always retained, and before any entry is
// retained the log's base hash is the hash of entry First-1 = Last.
func appliedHead(st *store.Store) (uint64, wal.Hash, error) {
	h, err := st.Head()
	return h.Index, h.Hash, err
}

// idleReader reads from c; with idle set, each read must receive something
// within idle. The timeout is on the bytes, not on whole messages: a large
// message crossing a slow link arrives as long as it keeps moving.
type idleReader struct {
	c    net.Conn
	idle time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	if r.idle > 0 {
		if err := r.c.SetReadDeadline(time.Now().Add(r.idle)); err != nil {
			return 0, err
		}
	}
	return r.c.Read(p)
}

// session runs one connection to src. progressed reports whether it
// applied anything.
func (r *Replica) session(ctx context.Context, src string) (progressed bool, err error) {
	// A replica follows its source's log, never a Raft log: a Raft index
	// in its store came with a checkpoint of an HA root member's store (a
	// bootstrap), and would make the store refuse replicated entries.
	if r.st.RaftApplied() > 0 {
		if err := r.st.ResetRaft(ctx); err != nil {
			return false, fmt.Errorf("reset the raft index a snapshot brought: %w", err)
		}
		r.log.Info("reset the raft index a snapshot of an HA root member brought")
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	c, err := r.cfg.Dial(dctx, "tcp", src)
	cancel()
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", src, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	applied, hash, err := appliedHead(r.st)
	if err != nil {
		return false, fmt.Errorf("read applied head: %w", err)
	}
	hello := &Hello{Version: r.helloVersion(src), Database: r.cfg.Database, DBID: r.st.DBID(),
		ProcessID: r.cfg.ProcessID, LastIndex: applied}
	deadline := time.Now().Add(r.cfg.HandshakeTimeout)
	c.SetDeadline(deadline)
	if err := WriteMessage(c, hello); err != nil {
		return false, fmt.Errorf("send hello to %s: %w", src, err)
	}
	ir := &idleReader{c: c}
	br := bufio.NewReaderSize(ir, 256<<10)
	m, err := ReadMessage(br)
	if err != nil {
		return false, fmt.Errorf("handshake with %s: %w", src, err)
	}
	var w *Welcome
	switch m := m.(type) {
	case *Refuse:
		if m.Code == RefuseVersion && hello.Version > streamVersion {
			// An older source: speak an older version to it.
			r.legacy.Store(src, legacySource{at: time.Now(), version: fallbackVersion(hello.Version)})
			c.Close()
			return r.session(ctx, src)
		}
		return false, &RefusedError{Code: m.Code, Reason: m.Reason}
	case *Welcome:
		w = m
	default:
		return false, fmt.Errorf("%w: %s answered hello with %s", ErrMalformed, src, m.Type())
	}
	switch {
	case w.DBID != r.st.DBID():
		return false, &RefusedError{Code: RefuseWrongDBID, Reason: fmt.Sprintf("source %s serves database id %s, we have %s", src, w.DBID, r.st.DBID())}
	case w.ProcessID == r.cfg.ProcessID:
		return false, &RefusedError{Code: RefuseSelf, Reason: fmt.Sprintf("source %s is this process", src)}
	case w.NextIndex != applied+1:
		return false, fmt.Errorf("%w: source %s would start at %d, we need %d", ErrMalformed, src, w.NextIndex, applied+1)
	}
	if applied == 0 && r.cfg.BootstrapMinEntries >= 0 && w.AppliedIndex > uint64(r.cfg.BootstrapMinEntries) {
		return false, errNeedBootstrap
	}
	r.log.Info("replicating", "source", src, "from", applied+1, "source_applied", w.AppliedIndex)
	r.update(func(s *ReplicaState) { s.Status, s.ServerIndex = StatusStreaming, w.AppliedIndex })
	r.cfg.Metrics.streaming.WithLabelValues(r.cfg.Database).Set(1)
	c.SetWriteDeadline(time.Time{})
	if w.Version >= ReportVersion {
		defer r.startReports(ctx, c)()
	}

	rc := receiver{v: wal.Verifier{Index: applied, Hash: hash}}
	var gate *headGate
	if r.cfg.Verifier != nil {
		gate = &headGate{v: r.cfg.Verifier, db: r.st.DBID(), limit: r.cfg.MaxUnsignedBytes, applied: applied, appliedHash: hash}
	}
	db, ms := r.cfg.Database, r.cfg.Metrics
	var appliedTotal prometheus.Counter // entries_applied_total of db, resolved on the first batch
	apply := func(batch []wal.Entry, vouch *headsig.Head) error {
		if vouch != nil {
			// Before the apply: a server of this node that sees the new
			// entries finds the head that covers them.
			r.book.Add(*vouch)
			r.saveHead(false)
			r.update(func(s *ReplicaState) { s.SignedIndex = max(s.SignedIndex, vouch.Index) })
			ms.signedIndex.WithLabelValues(db).Set(float64(vouch.Index))
		}
		if len(batch) == 0 {
			return nil
		}
		last := batch[len(batch)-1].Index
		// Verified (and vouched for, with a public key): the children may
		// have the batch now, while the store makes it durable. Their
		// streams run before the committer does (relay.go).
		if r.relay.add(batch) {
			runtime.Gosched()
		}
		if r.cfg.BeforeApply != nil {
			r.cfg.BeforeApply(last)
		}
		t0 := time.Now()
		if err := r.st.Apply(ctx, batch); err != nil {
			return &streamError{kindApply, fmt.Errorf("apply entries %d..%d: %w", batch[0].Index, last, err)}
		}
		r.relay.durable(last)
		ms.applySeconds.Observe(time.Since(t0).Seconds())
		ms.batchSize.Observe(float64(len(batch)))
		if appliedTotal == nil {
			appliedTotal = ms.entriesApplied.WithLabelValues(db)
		}
		appliedTotal.Add(float64(len(batch)))
		if !progressed {
			r.dropPartialBootstrap()
		}
		progressed = true
		r.export()
		return nil
	}
	ir.idle = r.cfg.IdleTimeout
	// Entries relayed and not applied when the session ends are dropped:
	// the next session receives them again.
	defer r.relay.drop()
	for {
		m, err := ReadMessage(br)
		if err != nil {
			return progressed, fmt.Errorf("stream from %s: %w", src, err)
		}
		switch m := m.(type) {
		case *Entries:
			if err := rc.check(m.Entries); err != nil {
				if rc.v.Index == applied && atResumePoint(applied, hash, m.Entries) {
					return progressed, &streamError{kindHash, fmt.Errorf("%w: %s's entry %d does not chain from our entry %d: %v", errResumeMismatch, src, applied+1, applied, err)}
				}
				return progressed, fmt.Errorf("stream from %s: %w", src, err)
			}
			batch, vouch := m.Entries, (*headsig.Head)(nil)
			if gate != nil {
				if batch, vouch, err = gate.entries(m.Entries); err != nil {
					return progressed, fmt.Errorf("stream from %s: %w", src, err)
				}
			}
			if err := apply(batch, vouch); err != nil {
				return progressed, err
			}
		case *Head:
			if gate == nil {
				continue // without the public key, heads are not checked
			}
			batch, vouch, err := gate.head(m.Head)
			if err != nil {
				return progressed, fmt.Errorf("stream from %s: %w", src, err)
			}
			if err := apply(batch, vouch); err != nil {
				return progressed, err
			}
		case *Progress:
			r.update(func(s *ReplicaState) { s.ServerIndex = m.AppliedIndex })
		case *Root:
			r.update(func(s *ReplicaState) { s.RootHTTP = m.HTTP })
			ms.rootKnown.WithLabelValues(db).Set(float64(min(len(m.HTTP), 1)))
		case *Refuse:
			return progressed, &RefusedError{Code: m.Code, Reason: m.Reason}
		case *Done:
			return progressed, nil
		default:
			return progressed, fmt.Errorf("%w: unexpected %s in stream from %s", ErrMalformed, m.Type(), src)
		}
	}
}
