package bench

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// loadChunk is the number of keys per pipelined burst or HTTP batch while
// loading.
const loadChunk = 100

// Get measures random single gets and multi-gets over many connections
// against a loaded key space (see the package documentation).
func Get(ctx context.Context, cfg Config, targets []*Target, logf Logf) (*Result, error) {
	via := ""
	if cfg.GetVia == ReadViaHTTP {
		via = fmt.Sprintf(", through the HTTP API (GET /v1/%s/keys/{key}, keep-alive) on targets with an HTTP address", cfg.DB)
	}
	desc := fmt.Sprintf("%d connections each doing random gets over %d keys of %d bytes: %d%% of requests are %d-key multi-gets (mget), the rest single gets (get%s); %s",
		cfg.Conns, cfg.Keys, cfg.ValueSize, cfg.MultiPct, cfg.MultiKeys, via, cfg.Duration)
	s := newScenarioRun(&cfg, ScenarioGet, desc, targets, logf)
	ks := newKeySpace(&cfg)
	for _, t := range targets {
		if t.Memcache == "" {
			s.skip(t, "no memcache address")
			continue
		}
		via := cfg.LoadVia
		if via == LoadAuto {
			via = LoadMemcache
			if t.HTTP != "" {
				via = LoadHTTP
			}
		}
		if via == LoadHTTP && t.HTTP == "" {
			s.skip(t, "--load-via http but no http address")
			continue
		}
		logf("get: loading %d keys into %s via %s", cfg.Keys, t.Name, via)
		start := time.Now()
		err := ks.load(ctx, &cfg, t, via)
		if err != nil {
			if ctx.Err() != nil {
				return s.finish(ctx.Err())
			}
			s.fail(t, "loading %d keys via %s: %v", cfg.Keys, via, err)
			continue
		}
		d := time.Since(start)
		s.note("%s: loaded %d keys via %s in %.1fs (%.0f keys/s)", t.Name, cfg.Keys, via, d.Seconds(), float64(cfg.Keys)/d.Seconds())
		start = time.Now()
		ks.warm(ctx, &cfg, t)
		if ctx.Err() != nil {
			return s.finish(ctx.Err())
		}
		s.note("%s: read every key once before measuring, in %.1fs", t.Name, time.Since(start).Seconds())
	}
	name := plural(cfg.Conns, "conn")
	err := s.phases(ctx, []string{name}, func(t *Target, _, slice int, d time.Duration) *phaseRun {
		return getPhase(ctx, &cfg, t, ks, slice, d)
	})
	return s.finish(err)
}

// keySpace is the get scenario's data: key i is "k%06d" and its value is
// a slice of a random pool at an offset derived from i, so that values
// differ and can be checked without storing them.
type keySpace struct {
	keys []string
	pool []byte
	size int
}

func newKeySpace(cfg *Config) *keySpace {
	ks := &keySpace{keys: make([]string, cfg.Keys), size: cfg.ValueSize}
	for i := range ks.keys {
		ks.keys[i] = fmt.Sprintf("k%06d", i)
	}
	ks.pool = randomBytes(cfg.Seed+1, 1<<20+cfg.ValueSize)
	return ks
}

func (ks *keySpace) value(i int) []byte {
	off := (i * 7919) % (len(ks.pool) - ks.size + 1)
	return ks.pool[off : off+ks.size]
}

// load sets every key, cfg.Conns chunks at a time, and returns the first
// error.
func (ks *keySpace) load(ctx context.Context, cfg *Config, t *Target, via string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var bc *batchClient
	if via == LoadHTTP {
		bc = newBatchClient(t.HTTP, cfg.DB, cfg.Conns, cfg.Timeout)
		defer bc.Close()
	}
	var wg sync.WaitGroup
	for range cfg.Conns {
		wg.Go(func() {
			keys := make([]string, 0, loadChunk)
			vals := make([][]byte, 0, loadChunk)
			chunk := func() bool {
				lo := int(next.Add(loadChunk)) - loadChunk
				if lo >= len(ks.keys) || ctx.Err() != nil {
					return false
				}
				keys, vals = keys[:0], vals[:0]
				for i := lo; i < min(lo+loadChunk, len(ks.keys)); i++ {
					keys = append(keys, ks.keys[i])
					vals = append(vals, ks.value(i))
				}
				return true
			}
			if bc != nil {
				var body []byte
				for chunk() {
					body = appendBatch(body[:0], keys, vals)
					if _, err := bc.post(ctx, body); err != nil {
						cancel(err)
						return
					}
				}
				return
			}
			err := withConn(ctx, t.Memcache, cfg.Timeout, func(c *mcConn) error {
				for chunk() {
					// Each burst must finish within the timeout.
					if err := c.conn.SetDeadline(time.Now().Add(cfg.Timeout)); err != nil {
						return err
					}
					if err := c.setMany(keys, vals); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// warm reads every key once, loadChunk keys per multi-get over cfg.Conns
// connections, so that the phases measure a server in its steady state (a
// read cache filled by earlier reads) rather than its first read of each
// key; a server without a read cache does the same work and keeps nothing.
// Its answers are not checked and its errors are ignored: the phases
// check, and count, both.
func (ks *keySpace) warm(ctx context.Context, cfg *Config, t *Target) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Conns {
		wg.Go(func() {
			keys := make([]string, 0, loadChunk)
			withConn(ctx, t.Memcache, cfg.Timeout, func(c *mcConn) error {
				for {
					lo := int(next.Add(loadChunk)) - loadChunk
					if lo >= len(ks.keys) || ctx.Err() != nil {
						return nil
					}
					keys = keys[:0]
					for i := lo; i < min(lo+loadChunk, len(ks.keys)); i++ {
						keys = append(keys, ks.keys[i])
					}
					if err := c.conn.SetDeadline(time.Now().Add(cfg.Timeout)); err != nil {
						return err
					}
					if _, err := c.get(keys, func(int, []byte) {}); err != nil && c.broken {
						return err
					}
				}
			})
		})
	}
	wg.Wait()
}

func getPhase(ctx context.Context, cfg *Config, t *Target, ks *keySpace, slice int, d time.Duration) *phaseRun {
	env := newPhaseEnv(ctx, cfg)
	n := cfg.Conns
	sessions := make([]*mcSession, n)
	single := make([]*opCounter, n)
	multi := make([]*opCounter, n)
	errs := make([]errCounter, n)
	var httpSessions []*mcSession
	var httpReqs [][]byte
	if cfg.GetVia == ReadViaHTTP && t.HTTP != "" {
		httpSessions = make([]*mcSession, n)
		httpReqs = ks.httpRequests(t.HTTP, cfg.DB)
	}
	for i := range sessions {
		sessions[i] = &mcSession{addr: t.Memcache, env: env}
		defer sessions[i].close()
		_ = sessions[i].dial() // a failure is retried, and counted, by the worker
		if httpSessions != nil {
			httpSessions[i] = &mcSession{addr: t.HTTP, env: env}
			defer httpSessions[i].close()
			_ = httpSessions[i].dial()
		}
		single[i], multi[i] = newOpCounter(), newOpCounter()
	}
	elapsed := env.work(d, n, func(i int) {
		var hs *mcSession
		if httpSessions != nil {
			hs = httpSessions[i]
		}
		getLoop(env, cfg, i+n*slice, sessions[i], hs, httpReqs, ks, single[i], multi[i], &errs[i])
	})

	g, m := newOpCounter(), newOpCounter()
	r := &phaseRun{elapsed: elapsed}
	for i := range n {
		g.merge(single[i])
		m.merge(multi[i])
		r.errs.merge(&errs[i])
	}
	if cfg.MultiPct < 100 {
		r.add("get", g)
	}
	if cfg.MultiPct > 0 {
		r.add("mget", m)
	}
	return r
}

// httpRequests returns the HTTP request of each key.
func (ks *keySpace) httpRequests(host, db string) [][]byte {
	reqs := make([][]byte, len(ks.keys))
	for i, k := range ks.keys {
		reqs[i] = httpGetRequest(host, db, k)
	}
	return reqs
}

// getLoop runs one connection's gets; hs and httpReqs, if not nil, are
// what single gets go through instead of s.
func getLoop(env *phaseEnv, cfg *Config, w int, s, hs *mcSession, httpReqs [][]byte, ks *keySpace, single, multi *opCounter, ec *errCounter) {
	rng := newRand(cfg.Seed, 1000+w)
	nk := len(ks.keys)
	mkeys := make([]string, cfg.MultiKeys)
	midx := make([]int, cfg.MultiKeys)
	// seen[k] == gen marks key k as drawn for the current multi-get, so
	// that a multi-get asks for distinct keys.
	seen := make([]uint32, nk)
	gen := uint32(0)
	bad := 0
	check := func(i int, v []byte) {
		if !bytes.Equal(v, ks.value(midx[i])) {
			bad++
		}
	}
	for env.ctx.Err() == nil {
		c, err := s.conn()
		if err != nil {
			if !s.failed(err, ec) {
				return
			}
			continue
		}
		if rng.IntN(100) < cfg.MultiPct {
			if gen++; gen == 0 {
				clear(seen)
				gen = 1
			}
			for j := range mkeys {
				k := rng.IntN(nk)
				for seen[k] == gen {
					k = rng.IntN(nk)
				}
				seen[k] = gen
				midx[j], mkeys[j] = k, ks.keys[k]
			}
			bad = 0
			start := time.Now()
			hits, err := c.get(mkeys, check)
			d := time.Since(start)
			switch {
			case err != nil:
			case hits < len(mkeys):
				err = fmt.Errorf("%d of %d keys: %w", len(mkeys)-hits, len(mkeys), errMiss)
			case bad > 0:
				err = fmt.Errorf("%d of %d keys: %w", bad, len(mkeys), errBadValue)
			}
			if err != nil {
				if !s.failed(fmt.Errorf("multi-get: %w", err), ec) {
					return
				}
				continue
			}
			multi.add(d, hits, hits*ks.size)
			continue
		}
		k := rng.IntN(nk)
		var v []byte
		var found bool
		start := time.Now()
		if hs != nil {
			hc, herr := hs.conn()
			if herr != nil {
				if !hs.failed(herr, ec) {
					return
				}
				continue
			}
			v, found, err = hc.httpGetOne(httpReqs[k])
		} else {
			v, found, err = c.getOne(ks.keys[k])
		}
		d := time.Since(start)
		switch {
		case err != nil:
		case !found:
			err = errMiss
		case !bytes.Equal(v, ks.value(k)):
			err = errBadValue
		}
		if err != nil {
			fs := s
			if hs != nil {
				fs = hs
			}
			if !fs.failed(fmt.Errorf("get %s: %w", ks.keys[k], err), ec) {
				return
			}
			continue
		}
		single.add(d, 1, len(v))
	}
}
