package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/discovery"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/store"
)

// A proxy's pool is re-read from the overlay this long after the last of
// a burst of membership changes (a member that dies or joins is often one
// of several changes heard within a few gossip rounds), at the latest
// poolSettleMax after the first, and every poolResync anyway: round-trip
// estimates change without a change notification.
const (
	poolSettle    = 250 * time.Millisecond
	poolSettleMax = 2 * time.Second
	poolResync    = time.Second
)

// discoveredPool is the pool of a proxy database that names neither
// relays nor replicas: its members come from the overlay.
type discoveredPool struct {
	db      string
	id      store.DBID
	pool    *proxy.Pool
	sources []string // configured upstream sources: always fall-backs
	relay   atomic.Bool
	mu      sync.Mutex
	relays  []string // the relays asked now
	// prefetch, if not nil, subscribes to the relays asked now.
	prefetch *prefetchSet
}

// discoversPool reports whether proxy database d takes its pool's
// members from the overlay: the overlay is on and the configuration
// names no relays or replicas (which take precedence) and does not make
// it a relay (a configured relay names its replicas).
func (s *Server) discoversPool(d config.Database) bool {
	return s.overlay != nil && d.IsProxy() && len(d.Replicas) == 0 && len(d.Relays) == 0 && !d.Relay
}

// newDiscoveredPool registers the discovered pool of d and gives it the
// members the overlay shows now; prefetch, if not nil, follows its
// relays.
func (s *Server) newDiscoveredPool(d config.Database, id store.DBID, pool *proxy.Pool, sources []string, prefetch *prefetchSet) *discoveredPool {
	dp := &discoveredPool{db: d.Name, id: id, pool: pool, sources: sources, prefetch: prefetch}
	s.discovered.Store(d.Name, dp)
	s.refreshPool(dp)
	return dp
}

// refreshPool gives dp the members the overlay shows now. A proxy
// elected relay answers other proxies' fetches only once its pool asks
// the replicas, and stops before its pool goes back to the relays: it
// never asks a relay while it is one.
func (s *Server) refreshPool(dp *discoveredPool) {
	p := s.overlay.Pool(dp.db, dp.id, s.cfg.DC, discovery.DefaultPoolReplicas)
	fallback := append(slices.Clone(p.Fallback), dp.sources...)
	if !p.Relay {
		dp.relay.Store(false)
	}
	dp.pool.SetMembers(p.Preferred, fallback)
	dp.mu.Lock()
	if p.Relay {
		dp.relays = nil
	} else {
		dp.relays = p.Preferred
	}
	dp.mu.Unlock()
	if dp.prefetch != nil {
		// A relay asks the replicas, which publish no prefetch stream.
		if p.Relay {
			dp.prefetch.set(nil)
		} else {
			dp.prefetch.set(p.Preferred)
		}
	}
	if p.Relay {
		dp.relay.Store(true)
	}
}

// followPool keeps dp in step with the overlay until ctx ends.
func (s *Server) followPool(ctx context.Context, dp *discoveredPool) {
	s.followOverlay(ctx, func() { s.refreshPool(dp) })
}

// followOverlay calls refresh after each settled burst of membership
// changes and every poolResync until ctx ends.
func (s *Server) followOverlay(ctx context.Context, refresh func()) {
	t := time.NewTicker(poolResync)
	defer t.Stop()
	for {
		changed := s.overlay.Changed()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
			if !settle(ctx, s.overlay.Changed, poolSettle, poolSettleMax) {
				return
			}
		}
		refresh()
	}
}

// settle waits until no change was notified for quiet, or for at most
// limit; false if ctx ended first.
func settle(ctx context.Context, changed func() <-chan struct{}, quiet, limit time.Duration) bool {
	end := time.NewTimer(limit)
	defer end.Stop()
	for {
		next := changed()
		q := time.NewTimer(quiet)
		select {
		case <-ctx.Done():
			q.Stop()
			return false
		case <-end.C:
			q.Stop()
			return true
		case <-q.C:
			return true
		case <-next:
			q.Stop()
		}
	}
}

// discoveredRelay reports whether this node is an elected relay of proxy
// database db whose pool comes from the overlay.
func (s *Server) discoveredRelay(db string) bool {
	v, ok := s.discovered.Load(db)
	return ok && v.(*discoveredPool).relay.Load()
}

// poolSource completes a proxy's status with where its pool's members
// come from ("flags": the configuration; "discovery": the overlay) and,
// for a discovered pool, whether it is a relay now, the relays it asks
// and, with prefetch, those it is subscribed to.
func poolSource(m map[string]any, dp *discoveredPool) {
	px, _ := m["proxy"].(map[string]any)
	c, _ := m["cache"].(map[string]any)
	if px == nil || c == nil {
		return
	}
	if dp == nil {
		px["members_source"] = "flags"
		return
	}
	px["members_source"] = "discovery"
	dp.mu.Lock()
	relays := slices.Clone(dp.relays)
	dp.mu.Unlock()
	if relays == nil {
		relays = []string{}
	}
	c["relay"], c["relays"] = dp.relay.Load(), relays
	if dp.prefetch != nil {
		c["prefetch_relays"] = dp.prefetch.relays()
	}
}
