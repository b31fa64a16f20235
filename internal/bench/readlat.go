package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/quicksilver-kv/qs/internal/blocksock"
)

// ReadLat measures the latency of small reads on one connection while 0, 1,
// 2... other connections write large new values as fast as the server
// stores them (see the package documentation).
func ReadLat(ctx context.Context, cfg Config, targets []*Target, logf Logf) (*Result, error) {
	via := ""
	if cfg.ReadLatVia == ReadViaHTTP {
		via = fmt.Sprintf(" through the HTTP API (GET /v1/%s/keys/{key}, one keep-alive connection)", cfg.DB)
	}
	pace := ""
	if cfg.ReadLatWriteRate > 0 {
		pace = fmt.Sprintf(", at most %d writes/s in all", cfg.ReadLatWriteRate)
	}
	desc := fmt.Sprintf("1 connection gets %d 2-byte keys one at a time%s, in a cycle (%s), while %s other connections each set new keys with %d-byte random values, waiting for STORED before the next%s; %s per phase",
		cfg.ReadLatKeys, via, readerDesc(cfg.ReadLatReader), joinInts(cfg.ReadLatWriters), cfg.ReadLatValueSize, pace, cfg.Duration)
	s := newScenarioRun(&cfg, ScenarioReadLat, desc, targets, logf)

	keys := make([]string, cfg.ReadLatKeys)
	vals := make([][]byte, cfg.ReadLatKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%02d", i)
		vals[i] = []byte{'a' + byte(i/10), 'a' + byte(i%10)}
	}
	for _, t := range targets {
		if t.Memcache == "" {
			s.skip(t, "no memcache address")
			continue
		}
		if cfg.ReadLatVia == ReadViaHTTP && t.HTTP == "" {
			s.skip(t, "no HTTP address to read through")
			continue
		}
		err := withConn(ctx, t.Memcache, cfg.Timeout, func(c *mcConn) error { return c.setMany(keys, vals) })
		if err != nil {
			if ctx.Err() != nil {
				return s.finish(ctx.Err())
			}
			s.fail(t, "loading the %d keys: %v", len(keys), err)
		}
	}

	names := make([]string, len(cfg.ReadLatWriters))
	for i, w := range cfg.ReadLatWriters {
		names[i] = plural(w, "writer")
	}
	// Writers add keys that are new even to a server that served earlier
	// runs; their values are random, so that they do not compress.
	runID := fmt.Sprintf("%08x", rand.Uint32())
	pool := randomBytes(cfg.Seed, 4<<20+cfg.ReadLatValueSize)
	err := s.phases(ctx, names, func(t *Target, i, slice int, d time.Duration) *phaseRun {
		p := &readLatPhase{
			cfg: &cfg, addr: t.Memcache, readAddr: t.Memcache, keys: keys, vals: vals, pool: pool, d: d, slice: slice,
			writers: cfg.ReadLatWriters[i], prefix: fmt.Sprintf("rl-%s-%d-%d-", runID, i, slice),
		}
		if cfg.ReadLatVia == ReadViaHTTP {
			p.readAddr = t.HTTP
			p.httpReqs = make([][]byte, len(keys))
			for k, key := range keys {
				p.httpReqs[k] = httpGetRequest(t.HTTP, cfg.DB, key)
			}
		}
		return p.run(ctx)
	})
	return s.finish(err)
}

type readLatPhase struct {
	cfg      *Config
	addr     string   // memcached, for the writers
	readAddr string   // for the reader: memcached, or the HTTP API
	httpReqs [][]byte // the reader's request for each key, if it reads through HTTP
	keys     []string
	vals     [][]byte
	pool     []byte // random bytes the writers' values are cut from
	writers  int
	prefix   string // of the writers' keys
	d        time.Duration
	slice    int
}

func (p *readLatPhase) run(ctx context.Context) *phaseRun {
	env := newPhaseEnv(ctx, p.cfg)
	n := 1 + p.writers
	sessions := make([]*mcSession, n)
	ops := make([]*opCounter, n)
	errs := make([]errCounter, n)
	for i := range sessions {
		sessions[i] = &mcSession{addr: p.addr, env: env}
		if i == 0 {
			sessions[i].addr, sessions[i].blocking = p.readAddr, p.cfg.ReadLatReader == ReaderThread
		}
		defer sessions[i].close()
		_ = sessions[i].dial() // a failure is retried, and counted, by the worker
		ops[i] = newOpCounter()
	}
	elapsed := env.work(p.d, n, func(i int) {
		if i == 0 {
			p.read(env, sessions[0], ops[0], &errs[0])
		} else {
			p.write(env, i-1, sessions[i], ops[i], &errs[i])
		}
	})

	r := &phaseRun{elapsed: elapsed}
	r.add("read", ops[0])
	if p.writers > 0 {
		w := newOpCounter()
		for _, o := range ops[1:] {
			w.merge(o)
		}
		r.add("write", w)
	}
	for i := range errs {
		r.errs.merge(&errs[i])
	}
	return r
}

// readerDesc says how the reader waits, for the report.
func readerDesc(mode string) string {
	if mode == ReaderThread && blocksock.Supported {
		return "waiting in read(2) on a thread of its own"
	}
	return "waiting in Go's network poller"
}

// read gets the keys one at a time, in a cycle, and checks every value.
func (p *readLatPhase) read(env *phaseEnv, s *mcSession, oc *opCounter, ec *errCounter) {
	if s.blocking {
		// The same thread for every call: it is the one the kernel wakes.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	for i := 0; env.ctx.Err() == nil; i++ {
		c, err := s.conn()
		if err != nil {
			if !s.failed(err, ec) {
				return
			}
			continue
		}
		k := i % len(p.keys)
		var v []byte
		var found bool
		start := time.Now()
		if p.httpReqs != nil {
			v, found, err = c.httpGetOne(p.httpReqs[k])
		} else {
			v, found, err = c.getOne(p.keys[k])
		}
		d := time.Since(start)
		switch {
		case err != nil:
		case !found:
			err = errMiss
		case !bytes.Equal(v, p.vals[k]):
			err = errBadValue
		}
		if err != nil {
			if !s.failed(fmt.Errorf("get %s: %w", p.keys[k], err), ec) {
				return
			}
			continue
		}
		oc.add(d, 1, len(v))
	}
}

// write sets new keys with random values, one at a time, at most at its
// share of the phase's write rate.
func (p *readLatPhase) write(env *phaseEnv, w int, s *mcSession, oc *opCounter, ec *errCounter) {
	rng := newRand(p.cfg.Seed, w+1000*p.slice)
	size := p.cfg.ReadLatValueSize
	pace := newPacer(p.cfg.ReadLatWriteRate, p.writers)
	for seq := 0; env.ctx.Err() == nil; seq++ {
		if !pace.wait(env.ctx) {
			return
		}
		c, err := s.conn()
		if err != nil {
			if !s.failed(err, ec) {
				return
			}
			continue
		}
		key := fmt.Sprintf("%s%d-%d", p.prefix, w, seq)
		off := rng.IntN(len(p.pool) - size + 1)
		start := time.Now()
		err = c.set(key, p.pool[off:off+size])
		d := time.Since(start)
		if err != nil {
			if !s.failed(fmt.Errorf("set %s: %w", key, err), ec) {
				return
			}
			continue
		}
		oc.add(d, 1, size)
	}
}

// pacer spaces one writer's requests so that n writers together send at
// most rate per second. A writer that falls behind (the server is slower
// than its share) is not owed the missed requests: it never sends a burst
// to catch up, as a client with its own work to do would not.
type pacer struct {
	interval time.Duration // 0: no pacing
	next     time.Time
}

func newPacer(rate, n int) *pacer {
	if rate <= 0 || n <= 0 {
		return &pacer{}
	}
	return &pacer{interval: time.Duration(int64(n) * int64(time.Second) / int64(rate))}
}

// wait sleeps until the next request is due; false if ctx ended first.
func (p *pacer) wait(ctx context.Context) bool {
	if p.interval == 0 {
		return true
	}
	now := time.Now()
	if p.next.IsZero() || now.Sub(p.next) > p.interval {
		p.next = now // late by more than one request: start afresh
	}
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	p.next = p.next.Add(p.interval)
	return true
}

// withConn runs fn on a new connection to addr whose I/O is bounded by
// timeout and aborted when ctx ends.
func withConn(ctx context.Context, addr string, timeout time.Duration, fn func(c *mcConn) error) error {
	c, err := dialMC(ctx, addr)
	if err != nil {
		return errDial{err}
	}
	defer c.Close()
	if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	return fn(c)
}

// joinInts writes 1, 2 and 3.
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
