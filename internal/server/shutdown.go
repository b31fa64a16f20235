package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/metrics/storecollector"
)

// Shutdown stops accepting, lets requests in flight finish (bounded by
// ctx), stops every goroutine and closes the databases.
func (s *Server) Shutdown(ctx context.Context) error {
	close(s.quit)
	var errs []error
	if s.stopBackground != nil {
		s.stopBackground()
	}
	// Leave the overlay first: the others stop choosing this node at once.
	s.leaveOverlay()
	if s.repl != nil {
		if err := s.repl.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("repl shutdown: %w", err))
		}
	}
	if s.http != nil {
		// Stop accepting first and let Serve return, so that a connection
		// accepted at this very moment is tracked before Shutdown looks
		// for active connections (otherwise it can be dropped unanswered).
		s.httpLn.Close()
		<-s.httpServed
		// net/http drops a request it reads after Shutdown began, even on
		// a connection accepted before: let accepted connections get their
		// answer first (bounded by ctx and the read-header timeout).
		s.httpBusy.waitQuiet(ctx)
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			s.http.Close()
		}
	}
	for _, mc := range s.mc {
		if err := mc.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("memcache shutdown: %w", err))
		}
	}
	s.wg.Wait()
	errs = append(errs, s.stopRaft(), s.closeStores())
	return errors.Join(errs...)
}

func (s *Server) leaveOverlay() {
	if s.overlay == nil {
		return
	}
	if err := s.overlay.Leave(time.Second); err != nil {
		s.log.Warn("left the gossip overlay without telling every member", "err", err)
	}
}

func (s *Server) closePools() {
	for _, p := range s.prefetchers {
		p.Close()
	}
	s.prefetchers = nil
	for _, w := range s.warmers {
		w.Close()
	}
	s.warmers = nil
	for _, l := range s.l2s {
		l.Close()
	}
	s.l2s = nil
	for _, p := range s.pools {
		p.Close()
	}
	s.pools = nil
}

func (s *Server) closeStores() error {
	s.closePools()
	var errs []error
	for _, name := range s.order {
		storecollector.Stores.Remove(s.dbs[name].Store)
		if err := s.dbs[name].Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// connTracker counts HTTP connections that are new (accepted, no request
// read yet) or active (serving a request).
type connTracker struct {
	mu   sync.Mutex
	busy map[net.Conn]bool
}

func (t *connTracker) track(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy == nil {
		t.busy = map[net.Conn]bool{}
	}
	if st == http.StateNew || st == http.StateActive {
		t.busy[c] = true
	} else {
		delete(t.busy, c)
	}
}

func (t *connTracker) waitQuiet(ctx context.Context) {
	for {
		t.mu.Lock()
		n := len(t.busy)
		t.mu.Unlock()
		if n == 0 || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
}
