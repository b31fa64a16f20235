package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// The L2 tier of a proxy: the other proxies of its data centre (its
// peers), each the owner of the shard of the data centre's keys its node
// name maps to (internal/cache, ShardMap). A value a proxy does not hold
// (L1) is asked of the owner of its key's shard, for exactly the version
// the proxy's record names (repl's L2 request); what the owner does not
// hold, and the keys of a shard no peer owns or of the proxy's own
// shard, are fetched from the next tier (L3: the replicas, through the
// relays). An answer is used only if it is that version and matches the
// record's length, CRC and digest; anything else is a miss, never an
// error. A peer that is down or slow costs only latency: its requests
// end after AttemptTimeout, and it is left out (sidelined) for a
// doubling time while its connection is made again.

// L2Config configures an L2 tier.
type L2Config struct {
	// Database is the database name asked for in the Hello.
	Database string
	// DBID is the database id; peers serving another are refused.
	DBID store.DBID
	// Peers are the replication addresses of the data centre's proxies
	// (this node's own may be among them: it is recognized by its name).
	Peers []string
	// Shards is the data centre's shard map; NodeName is this node's
	// name, whose shard it owns and never asks for.
	Shards   cache.ShardMap
	NodeName string
	// Next fetches what L2 does not answer (L3).
	Next store.Fetcher
	// Count, when set, counts the keys each tier answered and not, and
	// the time it took (store.Store.CountTier).
	Count func(tier string, hits, misses int, d time.Duration)
	// ProcessID identifies this process. Default repl.DefaultProcessID.
	ProcessID repl.ProcessID
	// Dial opens a connection (TLS wraps it here). Default: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a connect and handshake. Default 2s.
	DialTimeout time.Duration
	// AttemptTimeout bounds one request to a peer. Default
	// cache.DefaultL2AttemptTimeout; the bounds of these settings are
	// cache.CheckL2Timing's.
	AttemptTimeout time.Duration
	// SidelineMin and SidelineMax bound the doubling time a peer is left
	// out after a failure. Defaults cache.DefaultL2SidelineMin and
	// cache.DefaultL2SidelineMax.
	SidelineMin, SidelineMax time.Duration
	// Metrics are the collectors the tier counts in, shared with the
	// process's pools. Default: a private NewMetrics().
	Metrics *Metrics
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *L2Config) EnsureDefaults() *L2Config {
	if c.ProcessID.IsZero() {
		c.ProcessID = repl.DefaultProcessID
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = cache.DefaultL2AttemptTimeout
	}
	if c.SidelineMin == 0 {
		c.SidelineMin = cache.DefaultL2SidelineMin
	}
	if c.SidelineMax == 0 {
		c.SidelineMax = cache.DefaultL2SidelineMax
	}
	return c
}

// Validate reports the first invalid field.
func (c *L2Config) Validate() error {
	switch {
	case c.Database == "":
		return errors.New("proxy: L2: no database name")
	case c.NodeName == "":
		return errors.New("proxy: L2: no node name: the shard this node owns is that of its name")
	case c.Next == nil:
		return errors.New("proxy: L2: no next tier to fetch misses from")
	case c.DialTimeout < time.Millisecond:
		return errors.New("proxy: L2: dial timeout below 1ms")
	}
	if err := cache.CheckL2Timing(c.AttemptTimeout, c.SidelineMin, c.SidelineMax, 0); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// L2 is the L2 tier in front of a next tier. It implements store.Fetcher.
type L2 struct {
	cfg   L2Config
	log   *slog.Logger
	self  int                     // this node's shard
	peers atomic.Pointer[[]*peer] // replaced whole by SetPeers
	hits  atomic.Int64

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	setMu  sync.Mutex // serializes SetPeers and Close
	closed bool
	wg     sync.WaitGroup
	rr     atomic.Uint64 // spreads keys over the owners of one shard
}

// peer is one proxy of the data centre, kept connected by its own
// goroutine.
type peer struct {
	addr string
	up   prometheus.Gauge
	stop context.CancelFunc // ends its keeper: it left the peer set

	mu struct {
		sync.Mutex
		fc       *repl.FetchConn
		name     string
		shard    int
		failures int // since the last answer; sets the sideline time
	}
}

// NewL2 starts keeping connections to the peers; Close stops it.
func NewL2(cfg L2Config, log *slog.Logger) (*L2, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	cfg.Metrics = orNew(cfg.Metrics)
	ctx, cancel := context.WithCancel(context.Background())
	l := &L2{cfg: cfg, log: log.With("db", cfg.Database), self: cfg.Shards.OfNode(cfg.NodeName), ctx: ctx, cancel: cancel}
	l.peers.Store(&[]*peer{})
	l.SetPeers(cfg.Peers)
	return l, nil
}

// SetPeers makes addrs the peer set, in that order: a peer already in
// the set keeps its connection, a new one is connected, and one no
// longer named is disconnected (a request in flight to it ends as a
// miss, fetched from the next tier). An address named twice counts
// once. A proxy whose peers come from the overlay calls it when its data
// centre changes; after Close it does nothing.
func (l *L2) SetPeers(addrs []string) {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if l.closed {
		return
	}
	old := map[string]*peer{}
	for _, p := range *l.peers.Load() {
		old[p.addr] = p
	}
	next := make([]*peer, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := old[a]; ok {
			next = append(next, p)
			delete(old, a)
			continue
		}
		if slices.ContainsFunc(next, func(p *peer) bool { return p.addr == a }) {
			continue
		}
		ctx, stop := context.WithCancel(l.ctx)
		p := &peer{addr: a, up: l.cfg.Metrics.l2PeerUp.WithLabelValues(l.cfg.Database, a), stop: stop}
		p.up.Set(0)
		next = append(next, p)
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.keep(ctx, p) }()
	}
	l.peers.Store(&next)
	for _, p := range old {
		p.stop()
		// Its keeper may still set the removed series: it is no longer
		// the one exported.
		l.cfg.Metrics.l2PeerUp.DeleteLabelValues(l.cfg.Database, p.addr)
	}
}

// Close stops the tier and closes its connections.
func (l *L2) Close() {
	l.setMu.Lock()
	l.closed = true
	l.setMu.Unlock()
	l.cancel()
	l.wg.Wait()
}

// Hits is the values L2 answered since the tier started.
func (l *L2) Hits() int64 { return l.hits.Load() }

// PeerStatus is one peer as the status page shows it.
type PeerStatus struct {
	Addr  string
	Name  string // "" until first connected
	Shard int    // -1 until first connected
	Up    bool
	Self  bool // this node itself (never asked)
}

// Status returns the peers, in the order they were given.
func (l *L2) Status() []PeerStatus {
	peers := *l.peers.Load()
	out := make([]PeerStatus, 0, len(peers))
	for _, p := range peers {
		p.mu.Lock()
		s := PeerStatus{Addr: p.addr, Name: p.mu.name, Shard: -1, Up: p.mu.fc != nil, Self: p.mu.name == l.cfg.NodeName}
		if s.Name != "" {
			s.Shard = p.mu.shard
		}
		p.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// keep connects p, learns its name, and connects it again after each
// failure, sidelined for a doubling time, until ctx ends.
func (l *L2) keep(ctx context.Context, p *peer) {
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, l.cfg.DialTimeout)
		fc, err := repl.DialFetch(dctx, l.cfg.Dial, p.addr, repl.FetchHello{Database: l.cfg.Database, DBID: l.cfg.DBID, ProcessID: l.cfg.ProcessID, Shard: true})
		cancel()
		if err == nil {
			p.mu.Lock()
			p.mu.fc, p.mu.name, p.mu.shard = fc, fc.Node, l.cfg.Shards.OfNode(fc.Node)
			self := fc.Node == l.cfg.NodeName
			p.mu.Unlock()
			if self {
				// This node's own address: it answers its own shard from
				// L1. Nothing to ask it.
				fc.Close()
				p.mu.Lock()
				p.mu.fc = nil
				p.mu.Unlock()
				return
			}
			p.up.Set(1)
			select {
			case <-fc.Done():
			case <-ctx.Done():
			}
			fc.Close()
			p.up.Set(0)
			p.mu.Lock()
			p.mu.fc = nil
			p.mu.Unlock()
		} else if re := (*repl.RefusedError)(nil); errors.As(err, &re) && re.Code == repl.RefuseSelf {
			// This node's own address (it refuses its own process id).
			p.mu.Lock()
			p.mu.name, p.mu.shard = l.cfg.NodeName, l.self
			p.mu.Unlock()
			return
		} else {
			l.log.Debug("L2 peer unreachable", "peer", p.addr, "err", err)
			p.mu.Lock()
			p.mu.failures++
			p.mu.Unlock()
		}
		p.mu.Lock()
		wait := l.cfg.SidelineMin << min(p.mu.failures, 16)
		p.mu.Unlock()
		t := time.NewTimer(min(wait, l.cfg.SidelineMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// owner returns a connection to a peer owning shard s, or nil.
func (l *L2) owner(s int) (*peer, *repl.FetchConn) {
	peers := *l.peers.Load()
	n := len(peers)
	start := int(l.rr.Add(1) % uint64(max(n, 1)))
	for i := range n {
		p := peers[(start+i)%n]
		p.mu.Lock()
		fc, shard := p.mu.fc, p.mu.shard
		p.mu.Unlock()
		if fc != nil && shard == s {
			return p, fc
		}
	}
	return nil, nil
}

// Fetch asks the owners of the items' shards for their versions, then
// fetches the rest from the next tier.
func (l *L2) Fetch(ctx context.Context, asOf uint64, items []store.FetchItem) error {
	type ask struct {
		p   *peer
		fc  *repl.FetchConn
		idx []int
	}
	var asks []*ask
	byPeer := map[*peer]*ask{}
	var rest []int
	skipped := 0
	for i := range items {
		s := l.cfg.Shards.Of(items[i].Key)
		if s == l.self {
			rest = append(rest, i)
			continue
		}
		p, fc := l.owner(s)
		if p == nil {
			skipped++
			rest = append(rest, i)
			continue
		}
		a := byPeer[p]
		if a == nil {
			a = &ask{p: p, fc: fc}
			byPeer[p] = a
			asks = append(asks, a)
		}
		if len(a.idx) == repl.MaxFetchKeys {
			rest = append(rest, i)
			continue
		}
		a.idx = append(a.idx, i)
	}
	if skipped > 0 {
		l.cfg.Metrics.l2Skipped.WithLabelValues(l.cfg.Database).Add(float64(skipped))
	}
	if len(asks) > 0 {
		start := time.Now()
		missed := make([][]int, len(asks))
		var wg sync.WaitGroup
		for j, a := range asks {
			wg.Add(1)
			go func() { defer wg.Done(); missed[j] = l.ask(ctx, a.p, a.fc, asOf, items, a.idx) }()
		}
		wg.Wait()
		asked, miss := 0, 0
		for j, a := range asks {
			asked += len(a.idx)
			miss += len(missed[j])
			rest = append(rest, missed[j]...)
		}
		l.hits.Add(int64(asked - miss))
		if l.cfg.Count != nil {
			l.cfg.Count("l2", asked-miss, miss, time.Since(start))
		}
	}
	if len(rest) == 0 {
		return nil
	}
	sub := make([]store.FetchItem, len(rest))
	for j, i := range rest {
		sub[j] = items[i]
	}
	start := time.Now()
	err := l.cfg.Next.Fetch(ctx, asOf, sub)
	if l.cfg.Count != nil {
		if err != nil {
			l.cfg.Count("l3", 0, len(sub), time.Since(start))
		} else {
			l.cfg.Count("l3", len(sub), 0, time.Since(start))
		}
	}
	if err != nil {
		return err
	}
	for j, i := range rest {
		items[i].Value = sub[j].Value
	}
	return nil
}

// ask sends one L2 request to p for items[idx] and sets the Value of
// those it answered right; it returns the others.
func (l *L2) ask(ctx context.Context, p *peer, fc *repl.FetchConn, asOf uint64, items []store.FetchItem, idx []int) (missed []int) {
	keys := make([]repl.FetchKey, len(idx))
	for j, i := range idx {
		keys[j] = repl.FetchKey{Key: items[i].Key, Index: items[i].Index}
	}
	actx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
	defer cancel()
	ans, err := fc.Fetch(actx, asOf, keys)
	if err != nil {
		result := "error"
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			result = "timeout"
		}
		l.fail(p, fc, result, err)
		return idx
	}
	bad := 0
	for j, i := range idx {
		r, it := &ans.Results[j], &items[i]
		switch {
		case r.Status != repl.FetchOK:
			missed = append(missed, i)
		case r.Index != it.Index || !it.Check(r.Value):
			bad++
			missed = append(missed, i)
		default:
			it.Value = r.Value
		}
	}
	if bad > 0 {
		l.fail(p, fc, "bad_answer", fmt.Errorf("%d of %d values not the version asked or not matching their records", bad, len(idx)))
		return missed
	}
	l.cfg.Metrics.l2Requests.WithLabelValues(l.cfg.Database, p.addr, "ok").Inc()
	p.mu.Lock()
	p.mu.failures = 0
	p.mu.Unlock()
	return missed
}

// fail counts a failed request and sidelines p: its connection closes,
// and its keeper connects it again after the sideline time.
func (l *L2) fail(p *peer, fc *repl.FetchConn, result string, err error) {
	l.cfg.Metrics.l2Requests.WithLabelValues(l.cfg.Database, p.addr, result).Inc()
	l.log.Debug("L2 request failed", "peer", p.addr, "result", result, "err", err)
	p.mu.Lock()
	p.mu.failures++
	if p.mu.fc == fc {
		p.mu.fc = nil
	}
	p.mu.Unlock()
	p.up.Set(0)
	fc.Close()
}
