package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Write measures durable write batches through the HTTP API (see the
// package documentation). Targets without an HTTP address are skipped.
func Write(ctx context.Context, cfg Config, targets []*Target, logf Logf) (*Result, error) {
	desc := fmt.Sprintf("%d HTTP clients each POST /v1/%s/batch with batches of %s new keys (one size per phase) with %d-byte random values, waiting for the answer before the next; %s per phase",
		cfg.Conns, cfg.DB, joinInts(cfg.BatchSizes), cfg.ValueSize, cfg.Duration)
	s := newScenarioRun(&cfg, ScenarioWrite, desc, targets, logf)
	for _, t := range targets {
		if t.HTTP == "" {
			s.skip(t, "no http address (the write scenario has no baseline unless a target speaks the qs HTTP API)")
		}
	}
	if len(s.active()) == 0 {
		s.note("no target has an http address: nothing to measure")
		return s.finish(nil)
	}
	names := make([]string, len(cfg.BatchSizes))
	for i, b := range cfg.BatchSizes {
		names[i] = fmt.Sprintf("batch %d", b)
	}
	runID := fmt.Sprintf("%08x", rand.Uint32())
	pool := randomBytes(cfg.Seed+2, 4<<20+cfg.ValueSize)
	err := s.phases(ctx, names, func(t *Target, i, slice int, d time.Duration) *phaseRun {
		p := &writePhase{
			cfg: &cfg, addr: t.HTTP, batch: cfg.BatchSizes[i], pool: pool, d: d, slice: slice,
			prefix: fmt.Sprintf("wr-%s-%d-%d-", runID, i, slice),
		}
		return p.run(ctx)
	})
	return s.finish(err)
}

type writePhase struct {
	cfg    *Config
	addr   string
	batch  int
	pool   []byte
	prefix string
	d      time.Duration
	slice  int
}

func (p *writePhase) run(ctx context.Context) *phaseRun {
	bc := newBatchClient(p.addr, p.cfg.DB, p.cfg.Conns, p.cfg.Timeout)
	defer bc.Close()
	env := newPhaseEnv(ctx, p.cfg)
	n := p.cfg.Conns
	ops := make([]*opCounter, n)
	errs := make([]errCounter, n)
	for i := range ops {
		ops[i] = newOpCounter()
	}
	elapsed := env.work(p.d, n, func(i int) {
		p.client(env, bc, i, ops[i], &errs[i])
	})
	r := &phaseRun{elapsed: elapsed}
	all := newOpCounter()
	for i := range n {
		all.merge(ops[i])
		r.errs.merge(&errs[i])
	}
	r.add("batch", all)
	return r
}

// client posts batches of new keys one after the other and checks that
// the committed index increases.
func (p *writePhase) client(env *phaseEnv, bc *batchClient, w int, oc *opCounter, ec *errCounter) {
	rng := newRand(p.cfg.Seed, 2000+w+1000*p.slice)
	size := p.cfg.ValueSize
	keys := make([]string, p.batch)
	vals := make([][]byte, p.batch)
	var body []byte
	var last uint64
	for seq := 0; env.ctx.Err() == nil; seq++ {
		for j := range keys {
			keys[j] = fmt.Sprintf("%s%d-%d-%d", p.prefix, w, seq, j)
			off := rng.IntN(len(p.pool) - size + 1)
			vals[j] = p.pool[off : off+size]
		}
		body = appendBatch(body[:0], keys, vals)
		start := time.Now()
		idx, err := bc.post(env.run, body)
		d := time.Since(start)
		if err == nil && idx <= last {
			err = fmt.Errorf("%w: %d after %d", errIndexNotIncreasing, idx, last)
		}
		if err != nil {
			if env.interrupted() {
				return
			}
			ec.add(err)
			var he *HTTPError
			if !errors.As(err, &he) && !errors.Is(err, errBadBatchReply) && !errors.Is(err, errIndexNotIncreasing) {
				// A transport error: do not spin on a dead server.
				sleepCtx(env.ctx, reconnectPause)
			}
			if idx > last {
				last = idx
			}
			continue
		}
		last = idx
		oc.add(d, p.batch, p.batch*size)
	}
}
