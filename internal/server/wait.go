package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/statuspage"
)

// A new replica (no data directory yet, no db_id configured) takes its
// database id from a source before it creates its store. Nodes started
// together (systemd, Kubernetes) come up in any order, so a replica whose
// sources do not answer yet waits for them, asking again with a capped
// backoff, while its HTTP listener answers /healthz with 503 and its
// status with "state": "waiting".

const (
	// sourceWaitFirst is the pause after the first failed attempt.
	sourceWaitFirst = 100 * time.Millisecond
	// sourceWaitMax caps the pause between attempts.
	sourceWaitMax = 5 * time.Second
	// sourceLearnTimeout bounds one attempt over all sources.
	sourceLearnTimeout = 30 * time.Second
)

// sourceBackoff is the pause after the n-th failed attempt (n ≥ 1):
// doubling from sourceWaitFirst, at most sourceWaitMax.
func sourceBackoff(n int) time.Duration {
	d := sourceWaitFirst
	for i := 1; i < n && d < sourceWaitMax; i++ {
		d *= 2
	}
	return min(d, sourceWaitMax)
}

// needsSource reports whether database d is a new replica that must learn
// its database id from a source before its store can be created.
func needsSource(cfg *config.Config, d config.Database) (bool, error) {
	if !d.IsStatic() || d.DBID != "" {
		return false, nil // a root, or a replica that learns it through the overlay
	}
	o, err := cfg.StoreOptions(d)
	if err != nil {
		return false, err
	}
	if !o.DBID.IsZero() {
		return false, nil
	}
	_, err = os.Stat(o.Dir)
	return errors.Is(err, os.ErrNotExist), nil
}

// waitState is what the status of a waiting database reports.
type waitState struct {
	mu struct {
		sync.Mutex
		attempts  int
		lastError string
		next      time.Time
	}
}

// awaitSources learns the database id of every waiting database, trying
// again with sourceBackoff until a source answers or ctx ends, and opens
// each one as it learns it.
func (s *Server) awaitSources(ctx context.Context) error {
	for _, d := range s.waiting {
		ws := s.waitStates[d.Name]
		s.meters.server.sourceWaiting.WithLabelValues(d.Name).Set(1)
		sources := append(append([]string{}, d.Upstream...), d.Secondary...)
		for n := 1; ; n++ {
			lctx, cancel := context.WithTimeout(ctx, sourceLearnTimeout)
			id, err := repl.LearnDBID(lctx, sources, d.Name, repl.DefaultProcessID, s.replDial())
			cancel()
			if err == nil {
				d.DBID = id.String()
				break
			}
			if permanentLearnError(err) {
				s.meters.server.sourceWaitFailures.WithLabelValues(d.Name).Inc()
				return fmt.Errorf("new replica %s: %w (set db_id in the configuration to start without asking a source)", d.Name, err)
			}
			s.meters.server.sourceWaitFailures.WithLabelValues(d.Name).Inc()
			pause := sourceBackoff(n)
			ws.mu.Lock()
			ws.mu.attempts = n
			ws.mu.lastError = err.Error()
			ws.mu.next = time.Now().Add(pause)
			ws.mu.Unlock()
			if n == 1 {
				s.log.Warn("new replica waiting for a source", "db", d.Name, "sources", sources, "err", err)
			} else {
				s.log.Debug("source still not answering", "db", d.Name, "attempt", n, "err", err)
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("new replica %s: stopped while waiting for a source: %w", d.Name, err)
			case <-t.C:
			}
		}
		s.meters.server.sourceWaiting.WithLabelValues(d.Name).Set(0)
		if err := s.openDatabase(d); err != nil {
			return err
		}
	}
	s.waiting = nil
	return nil
}

// swapHandler serves one handler until another replaces it.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// waitingHandler answers while some database waits for its sources:
// /healthz is 503 (not ready), /metrics is served, the status of a
// waiting database says "state": "waiting", the status page at / shows
// the waiting databases (GET /v1/node), and everything else is 503.
func (s *Server) waitingHandler() http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", metrics.Handler())
	m.Handle("GET /{$}", statuspage.Handler())
	m.HandleFunc("GET /v1/node", func(w http.ResponseWriter, _ *http.Request) {
		writeWaitJSON(w, http.StatusOK, s.waitNode(time.Now()))
	})
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("waiting for a source\n"))
	})
	m.HandleFunc("GET /v1/{db}/status", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("db")
		for _, d := range s.waiting {
			if d.Name == name {
				writeWaitJSON(w, http.StatusOK, s.waitStatus(d))
				return
			}
		}
		s.waitUnavailable(w)
	})
	m.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { s.waitUnavailable(w) })
	return m
}

// waitNode is GET /v1/node while databases wait: the node and, for each
// waiting database, its status, in the form the status page reads.
func (s *Server) waitNode(now time.Time) httpapi.NodeDoc {
	doc := httpapi.NodeDoc{Node: s.cfg.NodeName, Time: now.UTC().Format(time.RFC3339Nano), Process: httpapi.ReadProcess(), Databases: []httpapi.NodeDB{}}
	for _, d := range s.waiting {
		doc.Databases = append(doc.Databases, httpapi.NodeDB{Name: d.Name, Status: s.waitStatus(d), History: []statuspage.Point{}})
	}
	return doc
}

func (s *Server) waitStatus(d config.Database) map[string]any {
	ws := s.waitStates[d.Name]
	ws.mu.Lock()
	defer ws.mu.Unlock()
	m := map[string]any{
		"database":  d.Name,
		"node":      s.cfg.NodeName,
		"role":      d.RoleName(),
		"state":     "waiting",
		"upstream":  d.Upstream,
		"secondary": d.Secondary,
		"attempts":  ws.mu.attempts,
	}
	if ws.mu.lastError != "" {
		m["last_error"] = ws.mu.lastError
		m["next_attempt"] = ws.mu.next.UTC().Format(time.RFC3339Nano)
	}
	return m
}

func (s *Server) waitUnavailable(w http.ResponseWriter) {
	writeWaitJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{
		"code":    "unavailable",
		"message": "qs: this node is a new replica waiting for its sources to answer; see GET /v1/{db}/status",
	}})
}

func writeWaitJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// permanentLearnError reports whether every source refused in a way that
// waiting does not change: a refusal by the source (wrong database, this
// node itself), a failed TLS handshake (a certificate refused either
// way) or a hang-up before any answer (a TLS listener, say). A source that is not up yet (connection refused, timeout, reset)
// is worth waiting for.
func permanentLearnError(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, one := range j.Unwrap() {
				if !permanentSourceError(one) {
					return false
				}
			}
			return true
		}
	}
	return permanentSourceError(err)
}

func permanentSourceError(err error) bool {
	var refused *repl.RefusedError
	var opErr *net.OpError
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &refused), errors.As(err, &verify), errors.As(err, &unknownCA),
		errors.As(err, &hostname), errors.As(err, &invalid):
		return true
	case errors.Is(err, clusterauth.ErrBadKey), errors.Is(err, clusterauth.ErrNotKeyed), errors.Is(err, clusterauth.ErrRefused):
		// The source holds another cluster key, or none: waiting will not
		// change that.
		return true
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// A TLS alert from the source: it refused our certificate.
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		// The source accepted and hung up without a word (or reset the
		// connection with our hello unread): it expects TLS, a cluster
		// key handshake or another protocol on that address.
		return true
	}
	return false
}
