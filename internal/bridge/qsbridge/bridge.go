package qsbridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"github.com/quicksilver-kv/qs/internal/bridge"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Config configures a Bridge.
type Config struct {
	// Source is a replication address of any node of the source database
	// (its root, or a replica of it).
	Source string
	// Target is the HTTP address of the bridged root.
	Target string
	// Database is the database's name, the same on both sides.
	Database string
	// Token is the bearer token of the target's producer, which must be
	// allowed every key ("" prefix); empty when the target has open writes.
	Token string
	// Dial opens the replication connection (the cluster key's dialer).
	// Default: plain TCP.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds each request to the target and the handshake with
	// the source. Default 10s.
	Timeout time.Duration
	// IdleTimeout drops a source that sent nothing for this long (it sends
	// progress at least every few seconds). Default 30s.
	IdleTimeout time.Duration
	// Log receives the bridge's records. Default slog.Default().
	Log *slog.Logger
	// Metrics are the collectors the bridge counts in. Default: a
	// private bridge.NewMetrics().
	Metrics *bridge.Metrics
}

// ErrDiverged says the target's log is not a prefix of the source's.
var ErrDiverged = errors.New("qs bridge: the target's log has diverged from the source's")

// ErrConfig says the bridge cannot work with these two databases: another
// database id, a target that is not bridged, a token refused, a source
// that no longer holds the log the target needs.
var ErrConfig = errors.New("qs bridge: cannot bridge")

// Bridge copies the source's log into the target.
type Bridge struct {
	cfg Config
	tgt *target
	pid repl.ProcessID
	log *slog.Logger
}

// New checks cfg and returns a Bridge; nothing happens until Run.
func New(cfg Config) (*Bridge, error) {
	switch {
	case cfg.Source == "":
		return nil, fmt.Errorf("%w: no source replication address (--from)", ErrConfig)
	case cfg.Target == "":
		return nil, fmt.Errorf("%w: no target HTTP address (--to)", ErrConfig)
	case cfg.Database == "":
		return nil, fmt.Errorf("%w: no database name", ErrConfig)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Metrics = bridge.OrNew(cfg.Metrics)
	hc := &http.Client{Timeout: cfg.Timeout}
	return &Bridge{cfg: cfg, tgt: newTarget(cfg.Target, cfg.Database, cfg.Token, hc), pid: repl.NewProcessID(),
		log: cfg.Log.With("component", "bridge-qs", "db", cfg.Database)}, nil
}

// Run copies until ctx ends (then nil) or the bridge meets an error that
// retrying cannot fix (ErrDiverged, ErrConfig). Transient errors of either
// side are counted, logged and retried after a jittered backoff.
func (b *Bridge) Run(ctx context.Context) error {
	b.cfg.Metrics.CopyDone.Set(1) // a log bridge has no initial copy: it follows at once
	backoff := 100 * time.Millisecond
	for {
		progressed, err := b.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		kind := errKind(err)
		b.cfg.Metrics.Errors.WithLabelValues(kind).Inc()
		if errors.Is(err, ErrDiverged) || errors.Is(err, ErrConfig) {
			b.log.Error("bridge stopped", "kind", kind, "err", err)
			return err
		}
		if progressed {
			backoff = 100 * time.Millisecond
		}
		b.log.Warn("bridge session ended; starting again from the target's head", "kind", kind, "err", err)
		b.cfg.Metrics.Restarts.Inc()
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errKind is the kind label of qs_bridge_errors_total for a session error.
func errKind(err error) string {
	var ae *apiError
	switch {
	case errors.Is(err, ErrDiverged):
		return "diverged"
	case errors.Is(err, ErrConfig):
		return "config"
	case errors.As(err, &ae) && ae.Code == "condition_failed":
		return "conflict"
	case errors.As(err, &ae), errors.Is(err, errTarget):
		return "write"
	}
	return "source"
}

// errTarget marks a failure to reach the target.
var errTarget = errors.New("target")

// session runs one pass: the target's head, a stream from the source
// after it, each batch appended to the target. It returns only with an
// error (or when ctx ends); progressed says it appended something.
func (b *Bridge) session(ctx context.Context) (progressed bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	h, err := b.tgt.head(rctx)
	cancel()
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.permanent() {
			return false, fmt.Errorf("%w: read the target's head: %v", ErrConfig, err)
		}
		return false, fmt.Errorf("%w: read the target's head: %w", errTarget, err)
	}
	if !h.Bridged {
		return false, fmt.Errorf("%w: database %s on %s is not bridged (start it with bridged = true and the source's db_id, or qs serve --bridged DBID)", ErrConfig, b.cfg.Database, b.cfg.Target)
	}
	b.cfg.Metrics.Position.Set(float64(h.Index))

	dctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	c, err := b.cfg.Dial(dctx, "tcp", b.cfg.Source)
	cancel()
	if err != nil {
		return false, fmt.Errorf("dial source %s: %w", b.cfg.Source, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(b.cfg.Timeout))
	hello := &repl.Hello{Version: repl.MinProtocolVersion, Database: b.cfg.Database, DBID: h.DBID, ProcessID: b.pid, LastIndex: h.Index}
	if err := repl.WriteMessage(c, hello); err != nil {
		return false, fmt.Errorf("send hello to %s: %w", b.cfg.Source, err)
	}
	br := bufio.NewReaderSize(c, 256<<10)
	m, err := repl.ReadMessage(br)
	if err != nil {
		return false, fmt.Errorf("handshake with %s: %w", b.cfg.Source, err)
	}
	var w *repl.Welcome
	switch m := m.(type) {
	case *repl.Refuse:
		return false, refusal(m, h)
	case *repl.Welcome:
		w = m
	default:
		return false, fmt.Errorf("source %s answered hello with %s", b.cfg.Source, m.Type())
	}
	if w.DBID != h.DBID {
		return false, fmt.Errorf("%w: source serves database id %s, the target holds %s", ErrConfig, w.DBID, h.DBID)
	}
	if w.NextIndex != h.Index+1 {
		return false, fmt.Errorf("source %s would start at %d, the target needs %d", b.cfg.Source, w.NextIndex, h.Index+1)
	}
	b.log.Info("bridging", "source", b.cfg.Source, "target", b.cfg.Target, "from", h.Index+1, "source_applied", w.AppliedIndex)
	b.setLag(w.AppliedIndex, h.Index, 0)

	s := stream{v: wal.Verifier{Index: h.Index, Hash: h.Hash}, head: h}
	for {
		c.SetReadDeadline(time.Now().Add(b.cfg.IdleTimeout))
		m, err := repl.ReadMessage(br)
		if err != nil {
			return progressed, fmt.Errorf("stream from %s: %w", b.cfg.Source, err)
		}
		switch m := m.(type) {
		case *repl.Entries:
			if err := s.check(m.Entries); err != nil {
				return progressed, err
			}
			if err := b.append(ctx, m.Entries, &s); err != nil {
				return progressed, err
			}
			progressed = true
			b.setLag(max(s.sourceIndex, s.v.Index), s.v.Index, s.lastTime)
		case *repl.Progress:
			s.sourceIndex = m.AppliedIndex
			b.setLag(m.AppliedIndex, s.v.Index, s.lastTime)
		case *repl.Refuse:
			return progressed, refusal(m, s.head)
		default:
			return progressed, fmt.Errorf("unexpected %s in the stream from %s", m.Type(), b.cfg.Source)
		}
	}
}

// append writes one received batch to the target.
func (b *Bridge) append(ctx context.Context, es []wal.Entry, s *stream) error {
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	h, err := b.tgt.appendEntries(rctx, es)
	cancel()
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			if ae.permanent() {
				return fmt.Errorf("%w: append entries %d..%d: %v", ErrConfig, es[0].Index, es[len(es)-1].Index, err)
			}
			// condition_failed: the target moved (an earlier answer lost,
			// another bridge); the next session starts from its head.
			return fmt.Errorf("append entries %d..%d: %w", es[0].Index, es[len(es)-1].Index, err)
		}
		return fmt.Errorf("%w: append entries %d..%d: %w", errTarget, es[0].Index, es[len(es)-1].Index, err)
	}
	last := es[len(es)-1]
	if h.Index != last.Index || h.Hash != last.Hash {
		return fmt.Errorf("target's head after appending is %d, want %d with the source's hash", h.Index, last.Index)
	}
	s.head, s.lastTime = h, last.Time
	b.cfg.Metrics.Transactions.WithLabelValues("applied").Add(float64(len(es)))
	for i := range es {
		b.cfg.Metrics.ChangesApplied.Add(float64(len(es[i].Ops)))
	}
	b.cfg.Metrics.Position.Set(float64(h.Index))
	b.cfg.Metrics.ApplySeconds.Observe(max(time.Since(time.Unix(0, last.Time)), 0).Seconds())
	return nil
}

// setLag exports how far the target is behind the source: entries, and
// the age of the last entry appended (0: none yet) while behind.
func (b *Bridge) setLag(sourceIndex, targetIndex uint64, lastTime int64) {
	if sourceIndex > targetIndex {
		b.cfg.Metrics.LagEntries.Set(float64(sourceIndex - targetIndex))
	} else {
		b.cfg.Metrics.LagEntries.Set(0)
	}
	if sourceIndex <= targetIndex || lastTime == 0 {
		b.cfg.Metrics.LagSeconds.Set(0)
		return
	}
	b.cfg.Metrics.LagSeconds.Set(max(time.Since(time.Unix(0, lastTime)), 0).Seconds())
}

// refusal turns the source's Refuse into an error: permanent when
// retrying cannot help.
func refusal(m *repl.Refuse, h head) error {
	err := &repl.RefusedError{Code: m.Code, Reason: m.Reason}
	switch m.Code {
	case repl.RefuseWrongDBID, repl.RefuseUnknownDatabase:
		return fmt.Errorf("%w: the source refused the target's database (id %s): %w", ErrConfig, h.DBID, err)
	case repl.RefuseLogTruncated:
		return fmt.Errorf("%w: the source no longer holds its log after index %d, where the target stands: "+
			"start the bridged root from a full replica's data directory (stopped), or empty while the source still holds its whole log: %w",
			ErrConfig, h.Index, err)
	case repl.RefuseAhead:
		return fmt.Errorf("the target (at %d) is ahead of this source: the source is behind, or the target diverged: %w", h.Index, err)
	}
	return err
}

// stream checks received batches against the hash chain from the
// target's head.
type stream struct {
	v           wal.Verifier
	head        head
	sourceIndex uint64
	lastTime    int64 // root time of the last entry appended
	checked     bool  // the first entry after the target's head passed
}

// check verifies a whole batch. The first entry after the head that does
// not chain from it means the target diverged.
func (s *stream) check(es []wal.Entry) error {
	v := wal.Verifier{Index: s.v.Index, Hash: s.v.Hash}
	for i := range es {
		e := &es[i]
		if e.Index != v.Index+1 {
			return fmt.Errorf("replication gap: entry %d after %d", e.Index, v.Index)
		}
		if err := v.Check(e); err != nil {
			if !s.checked {
				return fmt.Errorf("%w: the source's entry %d does not chain from the target's entry %d (hash %s): "+
					"the target took other writes, or holds another database: %v", ErrDiverged, e.Index, s.head.Index, s.head.Hash, err)
			}
			return fmt.Errorf("replication hash mismatch: %v", err)
		}
		s.checked = true
	}
	s.v = v
	return nil
}
