package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// errBridged: an ordinary write sent to a bridged root.
var errBridged = fmt.Errorf("%w: the database is bridged", store.ErrNotRoot)

// openBridged makes db a bridged root (config bridged = true): it takes
// entries only from its bridge, verbatim, exactly as a replica applies a
// stream, so its log stays the source's; it refuses every other write and
// writes no heartbeats of its own (StartContext runs no heartbeat loop for
// it): the source's arrive through the bridge.
func (s *Server) openBridged(d config.Database, db *service.Database) {
	st := db.Store
	// The series exist from the start, resolved once.
	appended := s.meters.server.bridgedEntries.WithLabelValues(d.Name)
	refused := s.meters.server.bridgedRefused.WithLabelValues(d.Name)
	// Ordinary writes refused are counted with the API's errors (code
	// not_root).
	db.Refuse = func() error {
		return fmt.Errorf("%w: database %s takes entries only from qs bridge qs, which copies another root's log into it; "+
			"send writes to the source's root, or restart this node without bridged to make it the root", errBridged, d.Name)
	}
	db.Bridge = func(ctx context.Context, entries []wal.Entry) error {
		err := st.Apply(ctx, entries)
		switch {
		case err == nil:
			appended.Add(float64(len(entries)))
		case errors.Is(err, store.ErrNotContiguous):
			refused.Inc()
		}
		return err
	}
	db.Status = func() map[string]any {
		return map[string]any{"role": d.RoleName(), "history": historyStatus(st)}
	}
	db.Status = s.withTreeStatus(d, db.Status)
}
