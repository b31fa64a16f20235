package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

var mBridgedEntries = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: metrics.Namespace, Subsystem: "bridged", Name: "entries_total",
	Help: "Entries a bridged root appended from its bridge (qs bridge qs), by database.",
}, []string{"db"}))

var mBridgedRefused = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: metrics.Namespace, Subsystem: "bridged", Name: "not_contiguous_total",
	Help: "Bridged entries a bridged root refused because they do not follow its log (another bridge, or a diverged root), by database.",
}, []string{"db"}))

// errBridged: an ordinary write sent to a bridged root.
var errBridged = fmt.Errorf("%w: the database is bridged", store.ErrNotRoot)

// openBridged makes db a bridged root (config bridged = true): it takes
// entries only from its bridge, verbatim, exactly as a replica applies a
// stream, so its log stays the source's; it refuses every other write and
// writes no heartbeats of its own (StartContext runs no heartbeat loop for
// it): the source's arrive through the bridge.
func (s *Server) openBridged(d config.Database, db *httpapi.Database) {
	st := db.Store
	mBridgedEntries.WithLabelValues(d.Name)
	mBridgedRefused.WithLabelValues(d.Name)
	// Ordinary writes refused are counted with the API's errors (code
	// not_root).
	db.CanWrite = func() error {
		return fmt.Errorf("%w: database %s takes entries only from qs bridge qs, which copies another root's log into it; "+
			"send writes to the source's root, or restart this node without bridged to make it the root", errBridged, d.Name)
	}
	db.Bridge = func(ctx context.Context, entries []wal.Entry) error {
		err := st.Apply(ctx, entries)
		switch {
		case err == nil:
			mBridgedEntries.WithLabelValues(d.Name).Add(float64(len(entries)))
		case errors.Is(err, store.ErrNotContiguous):
			mBridgedRefused.WithLabelValues(d.Name).Inc()
		}
		return err
	}
	db.Status = func() map[string]any {
		return map[string]any{"role": d.RoleName(), "history": historyStatus(st)}
	}
	db.Status = s.withTreeStatus(d, db.Status)
}
