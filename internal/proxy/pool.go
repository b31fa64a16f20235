package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// Config configures a Pool. The zero value of every field but Database,
// DBID and Replicas means its default, filled in by EnsureDefaults.
type Config struct {
	// Database is the database name asked for in the Hello.
	Database string
	// DBID is the database id; members serving another are refused.
	DBID store.DBID
	// Replicas are the replication addresses of full replicas to fetch
	// from, all preferred alike.
	Replicas []string
	// Fallback are asked when no replica can answer (typically the
	// proxy's upstream sources, up to the root).
	Fallback []string
	// ProcessID identifies this process. Default repl.DefaultProcessID.
	ProcessID repl.ProcessID
	// Dial opens a connection (TLS wraps it here). Default: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ConnsPerReplica is the connections kept to each member. Default 2.
	ConnsPerReplica int
	// DialTimeout bounds a connect and handshake. Default 2s.
	DialTimeout time.Duration
	// AttemptTimeout is how long a request to a member may go without a
	// byte arriving on its connection before the member counts as stalled
	// and the request is retried elsewhere; it is also the fixed part of
	// an attempt's deadline (see MinFetchRate). Default 1s.
	AttemptTimeout time.Duration
	// MinFetchRate (bytes per second) is the slowest a member may deliver
	// values and stay in service: an attempt's deadline is AttemptTimeout
	// plus the value bytes expected on its connection (the request's own
	// and those of the requests queued before it, known from the proxy's
	// records) at this rate. Default 1 MiB/s.
	MinFetchRate int64
	// SidelineMin and SidelineMax bound the doubling time a member is left
	// out after a failure. Defaults 500ms and 30s.
	SidelineMin, SidelineMax time.Duration
	// MaxKeysPerRequest splits larger reads. Default 1000.
	MaxKeysPerRequest int
	// Dynamic: the members are given later, and changed, by SetMembers
	// (a proxy that finds them through the overlay); the pool may start
	// with none, and a read then waits for one until its deadline.
	Dynamic bool
	// Metrics are the collectors the pool counts in, shared with the
	// process's other pools. Default: a private NewMetrics().
	Metrics *Metrics

	// naive emulates the design the reference started from, for tests
	// that show what the checks prevent: it asks for the latest value (no
	// "as of"), accepts any version, and rewrites the item's length and
	// CRC to match, defeating the store's own check.
	naive bool
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *Config) EnsureDefaults() *Config {
	if c.ProcessID.IsZero() {
		c.ProcessID = repl.DefaultProcessID
	}
	if c.ConnsPerReplica == 0 {
		c.ConnsPerReplica = 2
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = time.Second
	}
	if c.MinFetchRate == 0 {
		c.MinFetchRate = 1 << 20
	}
	if c.SidelineMin == 0 {
		c.SidelineMin = 500 * time.Millisecond
	}
	if c.SidelineMax == 0 {
		c.SidelineMax = 30 * time.Second
	}
	if c.MaxKeysPerRequest == 0 {
		c.MaxKeysPerRequest = 1000
	}
	return c
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case len(c.Replicas)+len(c.Fallback) == 0 && !c.Dynamic:
		return errors.New("proxy: no replicas to fetch from")
	case c.Database == "":
		return errors.New("proxy: no database name")
	case c.ConnsPerReplica < 1 || c.ConnsPerReplica > 64:
		return fmt.Errorf("proxy: ConnsPerReplica %d out of range 1..64", c.ConnsPerReplica)
	case c.DialTimeout < time.Millisecond || c.AttemptTimeout < time.Millisecond:
		return errors.New("proxy: timeouts below 1ms")
	case c.MinFetchRate < 1:
		return fmt.Errorf("proxy: MinFetchRate %d below 1 byte/s", c.MinFetchRate)
	case c.SidelineMin < time.Millisecond || c.SidelineMax < c.SidelineMin:
		return fmt.Errorf("proxy: sideline %v..%v invalid", c.SidelineMin, c.SidelineMax)
	case c.MaxKeysPerRequest < 1 || c.MaxKeysPerRequest > repl.MaxFetchKeys:
		return fmt.Errorf("proxy: MaxKeysPerRequest %d out of range 1..%d", c.MaxKeysPerRequest, repl.MaxFetchKeys)
	}
	return nil
}

// Pool fetches a proxy's missing values from its members. It implements
// store.Fetcher.
type Pool struct {
	cfg Config
	log *slog.Logger
	// members are those in service, read without a lock; SetMembers
	// replaces the slice (never changes one in place).
	members atomic.Pointer[[]*member]

	// memberMu serializes SetMembers and the end of retired members: the
	// metric series of an address are made and deleted under it. Never
	// taken while a member's mu is held.
	memberMu sync.Mutex
	// draining are retired members still answering requests, by address.
	draining map[string]*member

	fetchSeconds                                  prometheus.Observer
	fetchOK, fetchFail, retry, tooLarge, fallback prometheus.Counter

	mu struct {
		sync.Mutex
		closed bool
	}
}

// New returns a pool; it connects to members when first asked.
func New(cfg Config, log *slog.Logger) (*Pool, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	cfg.Metrics = orNew(cfg.Metrics)
	db, mt := cfg.Database, cfg.Metrics
	p := &Pool{cfg: cfg, log: log.With("component", "proxy-pool", "db", db),
		fetchSeconds: mt.fetchSeconds.WithLabelValues(db), fetchOK: mt.fetches.WithLabelValues(db, "ok"),
		fetchFail: mt.fetches.WithLabelValues(db, "failed"), retry: mt.fetches.WithLabelValues(db, "retried"),
		tooLarge: mt.fetches.WithLabelValues(db, "too_large"), fallback: mt.fetches.WithLabelValues(db, "fallback")}
	p.draining = map[string]*member{}
	var members []*member
	for _, pm := range planMembers(nil, cfg.Replicas, cfg.Fallback).add {
		members = append(members, p.newMember(pm.addr, pm.fallback))
	}
	p.members.Store(&members)
	p.setMemberGauges(members)
	return p, nil
}

func (p *Pool) newMember(addr string, fallback bool) *member {
	db, mt := p.cfg.Database, p.cfg.Metrics
	m := &member{p: p, addr: addr, conns: make([]*repl.FetchConn, p.cfg.ConnsPerReplica), queued: make([]int64, p.cfg.ConnsPerReplica),
		up: mt.replicaUp.WithLabelValues(db, addr), latency: mt.replicaLatency.WithLabelValues(db, addr),
		applied: mt.replicaApplied.WithLabelValues(db, addr), requests: mt.replicaRequests.MustCurryWith(prometheus.Labels{"db": db, "replica": addr})}
	m.fallback.Store(fallback)
	m.up.Set(1)
	return m
}

// snapshot is the members in service now.
func (p *Pool) snapshot() []*member { return *p.members.Load() }

// Close closes every connection and waits for their goroutines.
func (p *Pool) Close() {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	p.memberMu.Lock()
	all := slices.Concat(p.snapshot(), slices.Collect(maps.Values(p.draining)))
	p.memberMu.Unlock()
	for _, m := range all {
		m.closeConns()
	}
}

func (p *Pool) closed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.closed
}

// errBadAnswer: a member answered a version or bytes other than asked.
var errBadAnswer = errors.New("qs: replica answered a value that does not match the proxy's record")

// Fetch implements store.Fetcher: it gets every item, retrying elsewhere
// until ctx ends. A value no fetch answer can carry fails the read at
// once with store.ErrTooLarge: no member could ever send it.
func (p *Pool) Fetch(ctx context.Context, asOf uint64, items []store.FetchItem) error {
	return p.fetch(ctx, asOf, items, false)
}

// Quiet returns a store.Fetcher that fetches like the pool, on the same
// connections, for values nobody read (a shard warm-up's): a relay
// answers its requests without publishing the values on its prefetch
// stream (repl.FetchConn.FetchQuiet). A member older than the quiet
// fetch is asked as by Fetch.
func (p *Pool) Quiet() store.Fetcher { return quietPool{p} }

type quietPool struct{ p *Pool }

func (q quietPool) Fetch(ctx context.Context, asOf uint64, items []store.FetchItem) error {
	return q.p.fetch(ctx, asOf, items, true)
}

func (p *Pool) fetch(ctx context.Context, asOf uint64, items []store.FetchItem, quiet bool) error {
	start := time.Now()
	for i := range items {
		if it := &items[i]; it.Len > repl.MaxFetchValueBytes {
			p.tooLarge.Inc()
			return fmt.Errorf("%w: key %q: its value of %d bytes is larger than a fetch answer can carry (%d); read it from a full replica",
				store.ErrTooLarge, it.Key, it.Len, repl.MaxFetchValueBytes)
		}
	}
	pending := make([]int, len(items))
	for i := range pending {
		pending[i] = i
	}
	tried := map[*member]bool{}
	var lastErr error
	backoff := 2 * time.Millisecond
	attempts := 0
	for len(pending) > 0 {
		var need uint64
		for _, i := range pending {
			need = max(need, items[i].Index)
		}
		m := p.pick(need, asOf, tried)
		if m == nil {
			// Every member was tried: wait for replicas to catch up or
			// for a sideline to end, then go round again.
			clear(tried)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				p.fetchFail.Inc()
				switch {
				case lastErr != nil:
				case len(p.snapshot()) == 0:
					lastErr = errors.New("the pool has no member yet (none configured or found)")
				default:
					lastErr = fmt.Errorf("no member has applied index %d", need)
				}
				return fmt.Errorf("%d keys as of %d, %d attempts: %w (last: %v)", len(pending), asOf, attempts, ctx.Err(), lastErr)
			}
			backoff = min(2*backoff, 100*time.Millisecond)
			continue
		}
		tried[m] = true
		if attempts > 0 {
			p.retry.Inc()
		}
		if m.fallback.Load() {
			p.fallback.Inc()
		}
		attempts++
		n := min(len(pending), p.cfg.MaxKeysPerRequest)
		still, err := m.ask(ctx, asOf, items, pending[:n], quiet)
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", m.addr, err)
			if !errors.Is(err, errBadAnswer) {
				continue
			}
		}
		pending = append(still, pending[n:]...)
	}
	p.fetchSeconds.Observe(time.Since(start).Seconds())
	p.fetchOK.Inc()
	return nil
}

// pick chooses the member to ask next among those not tried yet: members
// in service that can answer as far as is known; then preferred members
// last known to be behind (what is known is as of their last answer, and
// a relay or replica is usually only a commit away: asking costs one
// round trip, while going round it to a fall-back bypasses the relay for
// good after every burst of writes); then the fall-backs; then sidelined
// members. Within a tier, two random members are compared on in-flight
// requests × latency.
func (p *Pool) pick(need, asOf uint64, tried map[*member]bool) *member {
	now := time.Now()
	var tiers [4][]*member
	for _, m := range p.snapshot() {
		if tried[m] {
			continue
		}
		m.mu.Lock()
		sidelined := now.Before(m.sidelinedUntil)
		known := !m.seen.IsZero()
		behind := known && m.lastApplied < need
		m.mu.Unlock()
		switch {
		case sidelined:
			tiers[3] = append(tiers[3], m)
		case m.fallback.Load():
			tiers[2] = append(tiers[2], m)
		case behind:
			tiers[1] = append(tiers[1], m)
		default:
			tiers[0] = append(tiers[0], m)
		}
	}
	for _, t := range tiers {
		switch len(t) {
		case 0:
			continue
		case 1:
			return t[0]
		}
		a, b := t[rand.IntN(len(t))], t[rand.IntN(len(t))]
		if b.score() < a.score() {
			a = b
		}
		return a
	}
	return nil
}

// member is one server the pool fetches from.
type member struct {
	p        *Pool
	addr     string
	fallback atomic.Bool
	inflight atomic.Int64

	up, latency, applied prometheus.Gauge
	requests             *prometheus.CounterVec

	// mu guards the connections and the health and position below.
	mu             sync.Mutex
	conns          []*repl.FetchConn
	queued         []int64 // per connection slot: value bytes of the requests in flight
	next           int
	sidelinedUntil time.Time
	fails          int
	ewma           float64 // seconds
	lastApplied    uint64
	lastHorizon    uint64
	seen           time.Time // of the last answer
	// active counts the requests between begin and end; a retired member
	// takes no new one, and closes its connections after the last.
	active   int
	retired  bool
	finished bool // retired, drained and closed: never used again
}

func (m *member) score() float64 {
	m.mu.Lock()
	l := m.ewma
	m.mu.Unlock()
	return l * float64(m.inflight.Load()+1)
}

// reserve picks the connection slot with the fewest value bytes in
// flight (in turn among equals) and adds want to them. It returns the
// slot and the bytes queued on it before.
func (m *member) reserve(want int64) (slot int, ahead int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.conns)
	slot = m.next % n
	for j := 1; j < n; j++ {
		if s := (m.next + j) % n; m.queued[s] < m.queued[slot] {
			slot = s
		}
	}
	m.next++
	ahead = m.queued[slot]
	m.queued[slot] += want
	return slot, ahead
}

func (m *member) release(slot int, want int64) {
	m.mu.Lock()
	m.queued[slot] -= want
	m.mu.Unlock()
}

// conn returns a live connection in slot, dialing one if needed.
func (m *member) conn(ctx context.Context, slot int) (*repl.FetchConn, error) {
	m.mu.Lock()
	fc := m.conns[slot]
	if fc != nil && fc.Err() == nil {
		m.mu.Unlock()
		return fc, nil
	}
	m.conns[slot] = nil
	m.mu.Unlock()
	if fc != nil {
		fc.Close()
	}
	cfg := &m.p.cfg
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	nfc, err := repl.DialFetch(dctx, cfg.Dial, m.addr, repl.FetchHello{Database: cfg.Database, DBID: cfg.DBID, ProcessID: cfg.ProcessID})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.p.closed() {
		m.mu.Unlock()
		nfc.Close()
		return nil, repl.ErrFetchConnClosed
	}
	if cur := m.conns[slot]; cur != nil && cur.Err() == nil {
		m.mu.Unlock()
		nfc.Close()
		return cur, nil
	}
	m.conns[slot] = nfc
	m.mu.Unlock()
	return nfc, nil
}

// closeConn closes fc and forgets it, if it is still one of the member's.
func (m *member) closeConn(fc *repl.FetchConn) {
	m.mu.Lock()
	for i, c := range m.conns {
		if c == fc {
			m.conns[i] = nil
		}
	}
	m.mu.Unlock()
	fc.Close()
}

func (m *member) closeConns() {
	m.mu.Lock()
	conns := append([]*repl.FetchConn(nil), m.conns...)
	clear(m.conns)
	m.mu.Unlock()
	for _, fc := range conns {
		if fc != nil {
			fc.Close()
		}
	}
}

// errAttemptTimeout: a member stalled (no byte for AttemptTimeout) or
// delivered too slowly (past the attempt's deadline).
var errAttemptTimeout = errors.New("qs: fetch attempt timed out")

// expectedBytes is what the answer to the items at idx will carry: their
// values (the records give their lengths) and a little per key.
func expectedBytes(items []store.FetchItem, idx []int) int64 {
	var n int64
	for _, i := range idx {
		n += int64(items[i].Len) + 16
	}
	return n
}

// ask sends the items at idx to the member (as a quiet fetch with quiet)
// and fills those it answers with the asked version. It returns the
// indexes still pending.
func (m *member) ask(ctx context.Context, asOf uint64, items []store.FetchItem, idx []int, quiet bool) ([]int, error) {
	if !m.begin() {
		return idx, errRetired
	}
	defer m.end()
	cfg := &m.p.cfg
	want := expectedBytes(items, idx)
	slot, ahead := m.reserve(want)
	defer m.release(slot, want)
	dctx, cancel := context.WithTimeout(ctx, cfg.AttemptTimeout)
	fc, err := m.conn(dctx, slot)
	cancel()
	if err != nil {
		m.failed(ctx, "error", err, nil)
		return idx, err
	}
	keys := make([]repl.FetchKey, len(idx))
	for j, i := range idx {
		keys[j] = repl.FetchKey{Key: items[i].Key, Index: items[i].Index}
		if cfg.naive {
			keys[j].Index = 0
		}
	}
	reqAsOf := asOf
	if cfg.naive {
		reqAsOf = 0
	}
	m.inflight.Add(1)
	t0 := time.Now()
	actx, stop := m.watch(ctx, fc, t0, ahead+want)
	send := fc.Fetch
	if quiet {
		send = fc.FetchQuiet
	}
	v, err := send(actx, reqAsOf, keys)
	stop()
	m.inflight.Add(-1)
	if err != nil {
		cause := context.Cause(actx)
		switch {
		case ctx.Err() == nil && errors.Is(cause, errAttemptTimeout):
			// The member stalled or is too slow for this request: the
			// connection is clogged with an answer nobody waits for; close
			// it (only it) and leave the member out for a while.
			m.failed(ctx, "timeout", cause, fc)
			return idx, cause
		case errors.Is(err, repl.ErrFetchConnClosedLocally):
			// Closed by this pool (after another request on it timed out,
			// or at shutdown): not the member's doing; asked elsewhere.
			if ctx.Err() == nil {
				m.requests.WithLabelValues("aborted").Inc()
			}
			return idx, err
		}
		m.failed(ctx, "error", err, fc)
		return idx, err
	}
	var still []int
	bad, partial := false, false
	for j, r := range v.Results {
		it := &items[idx[j]]
		switch {
		case cfg.naive && r.Status == repl.FetchOK:
			it.Value, it.Len, it.CRC, it.HasDigest = r.Value, len(r.Value), crc32.Checksum(r.Value, castagnoli), false
		case r.Status == repl.FetchOK && r.Index == it.Index && it.Check(r.Value):
			it.Value = r.Value
		case r.Status == repl.FetchOK, r.Status == repl.FetchMismatch, r.Status == repl.FetchAbsent, r.Status == repl.FetchError:
			bad = true
			still = append(still, idx[j])
		default: // behind, gone, skipped
			partial = true
			still = append(still, idx[j])
		}
	}
	m.answered(time.Since(t0), v.Applied, v.Horizon)
	switch {
	case bad:
		err := fmt.Errorf("%w (applied %d)", errBadAnswer, v.Applied)
		m.failed(ctx, "bad_answer", err, nil)
		return still, err
	case partial:
		m.requests.WithLabelValues("partial").Inc()
	default:
		m.requests.WithLabelValues("ok").Inc()
	}
	return still, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// watch returns a context for one request on fc, sent at start, that ends
// with cause errAttemptTimeout when no byte has arrived on fc for
// AttemptTimeout (the member stalled), or when the request is still
// unanswered at its deadline: AttemptTimeout plus bytes (its answer's and
// those queued before it on fc) at MinFetchRate (the member is too slow).
// A member streaming a large answer at a healthy rate is waited for. Call
// stop when the request is done.
func (m *member) watch(ctx context.Context, fc *repl.FetchConn, start time.Time, bytes int64) (actx context.Context, stop func()) {
	cfg := &m.p.cfg
	stallAfter := cfg.AttemptTimeout
	limit := cfg.AttemptTimeout + time.Duration(float64(bytes)/float64(cfg.MinFetchRate)*float64(time.Second))
	deadline := start.Add(limit)
	actx, cancel := context.WithCancelCause(ctx)
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		now := time.Now()
		last := fc.LastRead()
		if last.Before(start) {
			last = start
		}
		switch {
		case now.Sub(last) >= stallAfter:
			cancel(fmt.Errorf("%w: no byte for %v", errAttemptTimeout, now.Sub(last).Round(time.Millisecond)))
		case !now.Before(deadline):
			cancel(fmt.Errorf("%w: %d bytes not delivered in %v (min_fetch_rate %d B/s)", errAttemptTimeout, bytes, limit.Round(time.Millisecond), cfg.MinFetchRate))
		default:
			next := last.Add(stallAfter)
			if deadline.Before(next) {
				next = deadline
			}
			t.Reset(next.Sub(now))
		}
	}
	mu.Lock()
	t = time.AfterFunc(stallAfter, check)
	mu.Unlock()
	return actx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(nil)
	}
}

// answered records a member's answer: its latency and position, and that
// it is in service.
func (m *member) answered(d time.Duration, applied, horizon uint64) {
	m.mu.Lock()
	if m.ewma == 0 {
		m.ewma = d.Seconds()
	} else {
		m.ewma = 0.8*m.ewma + 0.2*d.Seconds()
	}
	m.lastApplied, m.lastHorizon, m.seen = applied, horizon, time.Now()
	wasOut := m.fails > 0
	m.fails, m.sidelinedUntil = 0, time.Time{}
	l := m.ewma
	m.mu.Unlock()
	m.latency.Set(l)
	m.applied.Set(float64(applied))
	m.up.Set(1)
	if wasOut {
		m.p.log.Info("replica back in service", "replica", m.addr)
	}
}

// failed sidelines the member for a doubling time, unless the reader
// itself gave up (not the member's fault), and closes fc (the connection
// that failed, if any). The member's other connections are left alone: a
// broken one fails on its own and is dialed again, and closing them would
// abort requests the member may be answering well.
func (m *member) failed(ctx context.Context, result string, err error, fc *repl.FetchConn) {
	if ctx.Err() != nil && !errors.Is(err, errBadAnswer) {
		return
	}
	m.requests.WithLabelValues(result).Inc()
	cfg := &m.p.cfg
	m.mu.Lock()
	m.fails++
	d := cfg.SidelineMin << min(m.fails-1, 16)
	d = min(d, cfg.SidelineMax)
	m.sidelinedUntil = time.Now().Add(d)
	fails := m.fails
	m.mu.Unlock()
	m.up.Set(0)
	if fails == 1 || fails%10 == 0 {
		m.p.log.Warn("replica sidelined", "replica", m.addr, "for", d, "failures", fails, "err", err)
	}
	if fc != nil {
		m.closeConn(fc)
	}
}

// MemberStatus is one member's state, for status pages.
type MemberStatus struct {
	Addr           string
	Fallback       bool
	Up             bool
	AppliedIndex   uint64
	LatencySeconds float64
	Failures       int
}

// Status returns the members' states.
func (p *Pool) Status() []MemberStatus {
	now := time.Now()
	members := p.snapshot()
	out := make([]MemberStatus, 0, len(members))
	for _, m := range members {
		m.mu.Lock()
		out = append(out, MemberStatus{Addr: m.addr, Fallback: m.fallback.Load(), Up: !now.Before(m.sidelinedUntil),
			AppliedIndex: m.lastApplied, LatencySeconds: m.ewma, Failures: m.fails})
		m.mu.Unlock()
	}
	return out
}
