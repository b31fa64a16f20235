package repl

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// DefaultHeartbeatInterval is how often the root writes a heartbeat.
const DefaultHeartbeatInterval = time.Second

// RunHeartbeats writes a heartbeat entry to the root store every interval
// (DefaultHeartbeatInterval if zero) until ctx ends, so replicas can
// measure their lag while no data changes. A failed heartbeat is logged and
// retried at the next tick. It returns when ctx ends or the store closes.
func RunHeartbeats(ctx context.Context, st *store.Store, interval time.Duration, log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if _, err := st.Heartbeat(ctx); err != nil {
			if errors.Is(err, store.ErrClosed) {
				return
			}
			if ctx.Err() == nil {
				log.Warn("cannot write heartbeat", "db", st.Name(), "err", err)
			}
		}
	}
}
