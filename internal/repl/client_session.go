package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

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
		case *Path:
			// Empty: the source knows no path (it is in no overlay).
			p := m.Nodes
			if len(p) == 0 {
				p = nil
			}
			r.setSourcePath(p)
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
