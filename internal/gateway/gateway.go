package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Gateway admits the writes of the producers of one producers file. The
// write path reads an immutable table through one atomic pointer and takes
// no lock; Reload builds a new table and swaps it in.
type Gateway struct {
	opts  Options
	m     *Metrics
	table atomic.Pointer[table]
	mu    struct {
		sync.Mutex // serialises loads
		// quotas outlive reloads, by producer name, so that a reload
		// neither refills nor empties a bucket.
		quotas map[string]*quota
		// loaded is the SHA-256 of the file content in force.
		loaded [sha256.Size]byte
		// failed identifies the last failed load (hash of the content, or
		// of the read error) and failedErr is its error: a file that stays
		// invalid is logged and counted once, not at every poll.
		failed    [sha256.Size]byte
		failedErr error
	}
}

// table is one load of the producers file. It is never modified.
type table struct {
	byToken   map[[sha256.Size]byte]*Producer
	producers []*Producer // sorted by name
}

// Producer is one producer of a load of the file. Its methods are safe for
// concurrent use.
type Producer struct {
	name     string
	prefixes []string
	dbs      map[string]bool // nil: every database
	maxWait  time.Duration
	q        *quota
	m        producerMetrics
}

// quota holds a producer's token buckets; rate.Limiter locks internally.
type quota struct {
	ops, bytes *rate.Limiter
}

// Open loads the producers file; an invalid file is an error. Run keeps it
// up to date.
func Open(o Options) (*Gateway, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	g := &Gateway{opts: o, m: o.Metrics}
	if g.m == nil {
		g.m = NewMetrics()
	}
	g.mu.quotas = map[string]*quota{}
	if _, err := g.Reload(); err != nil {
		return nil, err
	}
	return g, nil
}

// Reload reads the producers file and, if its content changed, puts it in
// force. It reports whether it did. On error (unreadable or invalid file)
// the producers in force stay; the failure is logged and counted once per
// distinct content (or read error).
func (g *Gateway) Reload() (changed bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, err := os.ReadFile(g.opts.Path)
	id := sha256.Sum256(b)
	if err != nil {
		id = sha256.Sum256([]byte("read error: " + err.Error()))
	}
	if g.table.Load() != nil {
		switch {
		case err == nil && id == g.mu.loaded:
			return false, nil
		case g.mu.failedErr != nil && id == g.mu.failed:
			return false, g.mu.failedErr
		}
	}
	var f *File
	if err == nil {
		f, err = ParseFile(b, g.opts.Path)
	}
	if err == nil {
		err = f.Validate(g.opts.Databases)
	}
	if err != nil {
		g.m.reloadsFailed.Inc()
		err = fmt.Errorf("producers file %s: %w", g.opts.Path, err)
		g.mu.failed, g.mu.failedErr = id, err
		if g.table.Load() != nil {
			g.opts.Logger.Error("producers file not reloaded; the previous producers stay in force", "err", err)
		}
		return false, err
	}
	g.mu.failedErr = nil
	old := g.table.Load()
	g.table.Store(g.buildLocked(f))
	g.mu.loaded = id
	g.m.reloadsOK.Inc()
	g.m.producers.Set(float64(len(f.Producers)))
	if old != nil {
		for _, p := range old.producers {
			if !slices.ContainsFunc(f.Producers, func(c ProducerConfig) bool { return c.Name == p.name }) {
				g.m.deleteProducer(p.name)
				delete(g.mu.quotas, p.name)
			}
		}
		g.opts.Logger.Info("producers file reloaded", "path", g.opts.Path, "producers", len(f.Producers))
	}
	if len(f.Producers) == 0 {
		g.opts.Logger.Warn("producers file lists no producer: every write is refused", "path", g.opts.Path)
	}
	return true, nil
}

// buildLocked makes the table of a valid file. g.mu is held.
func (g *Gateway) buildLocked(f *File) *table {
	t := &table{byToken: map[[sha256.Size]byte]*Producer{}}
	for _, c := range f.Producers {
		p := &Producer{name: c.Name, prefixes: slices.Clone(c.Prefixes), maxWait: *f.MaxWait, m: g.m.producer(c.Name)}
		if len(c.Databases) > 0 {
			p.dbs = map[string]bool{}
			for _, d := range c.Databases {
				p.dbs[d] = true
			}
		}
		p.q = g.mu.quotas[c.Name]
		if p.q == nil {
			p.q = &quota{ops: rate.NewLimiter(limitOf(c.OpsPerSecond), c.OpsBurst), bytes: rate.NewLimiter(limitOf(c.BytesPerSecond), c.BytesBurst)}
			g.mu.quotas[c.Name] = p.q
		} else {
			now := time.Now()
			p.q.ops.SetLimitAt(now, limitOf(c.OpsPerSecond))
			p.q.ops.SetBurstAt(now, c.OpsBurst)
			p.q.bytes.SetLimitAt(now, limitOf(c.BytesPerSecond))
			p.q.bytes.SetBurstAt(now, c.BytesBurst)
		}
		for _, h := range c.Tokens {
			sum, _ := parseTokenHash(h) // validated
			t.byToken[sum] = p
		}
		t.producers = append(t.producers, p)
	}
	slices.SortFunc(t.producers, func(a, b *Producer) int { return strings.Compare(a.name, b.name) })
	return t
}

// limitOf turns a configured rate (0: no limit) into a rate.Limit.
func limitOf(perSecond float64) rate.Limit {
	if perSecond == 0 {
		return rate.Inf
	}
	return rate.Limit(perSecond)
}

// Run reloads the producers file whenever its content changes, checking
// every PollInterval, until ctx ends.
func (g *Gateway) Run(ctx context.Context) {
	t := time.NewTicker(g.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.Reload() // logged and counted
	}
}

// Authenticate returns the producer whose token is presented in an
// Authorization header value ("Bearer <token>"). Errors are
// ErrUnauthenticated (no or malformed header) and ErrInvalidToken.
func (g *Gateway) Authenticate(authorization string) (*Producer, error) {
	token, ok := bearerToken(authorization)
	if !ok {
		g.m.rejectedUnauthenticated.Inc()
		return nil, ErrUnauthenticated
	}
	// The map is keyed by the hash of a high-entropy token: looking it up
	// leaks nothing useful about other tokens through timing.
	p := g.table.Load().byToken[sha256.Sum256([]byte(token))]
	if p == nil {
		g.m.rejectedInvalidToken.Inc()
		return nil, ErrInvalidToken
	}
	return p, nil
}

// bearerToken extracts the token of "Bearer <token>" (scheme
// case-insensitive, RFC 9110 §11.1).
func bearerToken(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	t := strings.TrimSpace(h[len(scheme):])
	return t, t != ""
}

// RefuseMemcacheWrite counts and returns the refusal of a memcached write
// (see ErrMemcacheWrite). A nil Gateway refuses nothing.
func (g *Gateway) RefuseMemcacheWrite() error {
	if g == nil {
		return nil
	}
	g.m.rejectedMemcache.Inc()
	return ErrMemcacheWrite
}

// Name is the producer's name.
func (p *Producer) Name() string { return p.name }

// Authorize checks that the producer may write every op of a batch to
// database db: nil, or a *ForbiddenError naming the first op that it may
// not. Only keys are looked at; conditions ("if") are reads and need no
// permission.
func (p *Producer) Authorize(db string, ops []wal.Op) error {
	if p.dbs != nil && !p.dbs[db] {
		p.m.rejected[reasonForbidden].Inc()
		return &ForbiddenError{Producer: p.name, DB: db}
	}
	for i, op := range ops {
		if !p.allows(op.Key) {
			p.m.rejected[reasonForbidden].Inc()
			return &ForbiddenError{Producer: p.name, DB: db, Op: i, Key: op.Key, Prefixes: p.prefixes}
		}
	}
	return nil
}

func (p *Producer) allows(key []byte) bool {
	for _, pre := range p.prefixes {
		if len(key) >= len(pre) && string(key[:len(pre)]) == pre {
			return true
		}
	}
	return false
}

// mayWrite reports whether the producer may write database db at all.
func (p *Producer) mayWrite(db string) bool { return p.dbs == nil || p.dbs[db] }

// Admit charges a write of ops operations and n key and value bytes to the
// producer's quotas. If the buckets hold enough it returns at once; if
// they will within max_wait it waits that long (bounded by ctx); else it
// refuses with a *QuotaError, charging nothing. A write larger than a
// bucket can never pass: the error wraps ErrOverBurst and
// store.ErrTooLarge.
func (p *Producer) Admit(ctx context.Context, ops, n int) error {
	now := time.Now()
	ro := p.q.ops.ReserveN(now, ops)
	if !ro.OK() {
		p.m.rejected[reasonOverBurst].Inc()
		return fmt.Errorf("%w: %w: %d ops, ops_burst of %q is %d", store.ErrTooLarge, ErrOverBurst, ops, p.name, p.q.ops.Burst())
	}
	rb := p.q.bytes.ReserveN(now, n)
	if !rb.OK() {
		ro.CancelAt(now)
		p.m.rejected[reasonOverBurst].Inc()
		return fmt.Errorf("%w: %w: %d bytes, bytes_burst of %q is %d", store.ErrTooLarge, ErrOverBurst, n, p.name, p.q.bytes.Burst())
	}
	dOps, dBytes := ro.DelayFrom(now), rb.DelayFrom(now)
	wait := max(dOps, dBytes)
	if wait > p.maxWait {
		ro.CancelAt(now)
		rb.CancelAt(now)
		e := &QuotaError{Producer: p.name, Quota: "ops", RetryAfter: wait - p.maxWait}
		reason := reasonQuotaOps
		if dBytes > dOps {
			e.Quota, reason = "bytes", reasonQuotaBytes
		}
		p.m.rejected[reason].Inc()
		return e
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			ro.Cancel()
			rb.Cancel()
			return ctx.Err()
		}
		p.m.throttled.Observe(wait.Seconds())
	}
	p.m.requests.Inc()
	p.m.ops.Add(float64(ops))
	p.m.bytes.Add(float64(n))
	return nil
}

// BatchBytes is what a batch weighs against bytes_per_second: the lengths
// of its keys and values.
func BatchBytes(ops []wal.Op) int {
	n := 0
	for _, op := range ops {
		n += len(op.Key) + len(op.Value)
	}
	return n
}

// RetryAfterSeconds rounds a retry delay up to the whole seconds of an
// HTTP Retry-After header, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	return int(max(1, math.Ceil(d.Seconds())))
}
