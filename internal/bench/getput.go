package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// GetPut measures durable single-key puts and then gets of the keys put,
// with cfg.Conns connections each waiting for its answer, against the
// scenario's memcache targets (qs, memcached) and the durable peers it
// starts (peers.go): Redis with appendfsync always and etcd. Only qs,
// Redis and etcd make a put durable before answering; memcached is the
// in-memory reference.
func GetPut(ctx context.Context, cfg Config, targets []*Target, logf Logf) (*Result, error) {
	desc := fmt.Sprintf("%d connections each put a new key with a %d-byte value and wait for the answer (durable on qs, Redis with appendfsync always and etcd); then %d connections get random keys of those put; %s per phase",
		cfg.Conns, cfg.ValueSize, cfg.Conns, cfg.Duration)
	s := newScenarioRun(&cfg, ScenarioGetPut, desc, targets, logf)
	for _, t := range targets {
		if t.Memcache == "" {
			s.skip(t, "no memcache address")
		}
	}
	peers := s.startPeers(ctx, func(ctx context.Context) (*Target, error) { return spawnRedis(ctx, &cfg, "redis", "") },
		func(ctx context.Context) (*Target, error) { return spawnEtcd(ctx, &cfg) })
	defer stopAll(peers)

	runID := fmt.Sprintf("%08x", rand.Uint32())
	pool := randomBytes(cfg.Seed+3, 1<<20+cfg.ValueSize)
	var mu sync.Mutex
	written := map[*Target][]putKey{}
	err := s.phases(ctx, []string{"put", "get"}, func(t *Target, i, slice int, d time.Duration) *phaseRun {
		p := &putPhase{cfg: &cfg, t: t, pool: pool, d: d, prefix: fmt.Sprintf("gp-%s-%d-", runID, slice)}
		if i == 0 {
			r, keys := p.put(ctx)
			mu.Lock()
			written[t] = append(written[t], keys...)
			mu.Unlock()
			return r
		}
		mu.Lock()
		keys := written[t]
		mu.Unlock()
		return p.get(ctx, keys)
	})
	res, err := s.finish(err)
	for _, t := range targets {
		if !t.Baseline {
			s.notePeerRatios("put", "put", t.Name, "etcd", "redis")
		}
	}
	return res, err
}

// startPeers starts each peer and adds it to the scenario's targets; a
// peer that is not installed or does not start is left out with a note.
func (s *scenarioRun) startPeers(ctx context.Context, spawns ...func(context.Context) (*Target, error)) []*Target {
	var out []*Target
	for _, spawn := range spawns {
		t, err := spawn(ctx)
		if err != nil {
			s.note("peer left out: %v", err)
			continue
		}
		out = append(out, t)
	}
	s.addTargets(out...)
	return out
}

// addTargets adds targets the scenario started itself.
func (s *scenarioRun) addTargets(ts ...*Target) {
	for _, t := range ts {
		s.targets = append(s.targets, t)
		s.res.Targets = append(s.res.Targets, *t)
	}
}

func stopAll(ts []*Target) {
	for _, t := range ts {
		StopTarget(t)
	}
}

// notePeerRatios notes the throughput of target over each of peers in
// phase for op: the same-run ratios the scenario is for (the table's
// ratios are against the baseline only).
func (s *scenarioRun) notePeerRatios(phase, op, target string, peers ...string) {
	find := func(name string) *OpStats {
		for i := range s.res.Phases {
			p := &s.res.Phases[i]
			if p.Name == phase && p.Target == name {
				return p.Op(op)
			}
		}
		return nil
	}
	a := find(target)
	if a == nil {
		return
	}
	for _, peer := range peers {
		if b := find(peer); b != nil && b.OpsPerSec > 0 {
			s.note("%s %s/s over %s's: %.2f× (%.0f vs %.0f)", target, op, peer, a.OpsPerSec/b.OpsPerSec, a.OpsPerSec, b.OpsPerSec)
		}
	}
}

type putKey struct {
	key string
	off int // of its value in the pool
}

type putPhase struct {
	cfg    *Config
	t      *Target
	pool   []byte
	d      time.Duration
	prefix string
}

func (p *putPhase) addr() string {
	switch {
	case p.t.Etcd != "":
		return p.t.Etcd
	case p.t.Redis != "":
		return p.t.Redis
	}
	return p.t.Memcache
}

// each runs fn on cfg.Conns connections for the phase, redialing after
// an error, and merges what they counted.
func (p *putPhase) each(ctx context.Context, op string, fn func(env *phaseEnv, w int, c kvConn, oc *opCounter, ec *errCounter) error) *phaseRun {
	env := newPhaseEnv(ctx, p.cfg)
	n := p.cfg.Conns
	ops := make([]*opCounter, n)
	errs := make([]errCounter, n)
	for i := range ops {
		ops[i] = newOpCounter()
	}
	elapsed := env.work(p.d, n, func(w int) {
		for env.ctx.Err() == nil {
			c, err := dialKV(env.ctx, p.t, p.addr(), p.cfg.Timeout)
			if err != nil {
				if env.ctx.Err() == nil {
					errs[w].add(err)
					sleepCtx(env.ctx, reconnectPause)
				}
				continue
			}
			err = fn(env, w, c, ops[w], &errs[w])
			c.Close()
			if err != nil && env.ctx.Err() == nil && !env.interrupted() {
				errs[w].add(err)
			}
		}
	})
	r := &phaseRun{elapsed: elapsed}
	total := newOpCounter()
	for i := range ops {
		total.merge(ops[i])
		r.errs.merge(&errs[i])
	}
	r.add(op, total)
	return r
}

// put: each connection sets new keys until the phase ends. It returns
// the keys stored.
func (p *putPhase) put(ctx context.Context) (*phaseRun, []putKey) {
	size := p.cfg.ValueSize
	keys := make([][]putKey, p.cfg.Conns)
	r := p.each(ctx, "put", func(env *phaseEnv, w int, c kvConn, oc *opCounter, ec *errCounter) error {
		rng := newRand(p.cfg.Seed, w)
		for env.ctx.Err() == nil {
			k := putKey{key: fmt.Sprintf("%s%d-%d", p.prefix, w, len(keys[w])), off: rng.IntN(len(p.pool) - size)}
			start := time.Now()
			if err := c.set(k.key, p.pool[k.off:k.off+size]); err != nil {
				return err
			}
			oc.add(time.Since(start), 1, size)
			keys[w] = append(keys[w], k)
		}
		return nil
	})
	var all []putKey
	for _, ks := range keys {
		all = append(all, ks...)
	}
	return r, all
}

// errWrongValue: a get returned another value than the one put.
var errWrongValue = errors.New("bench: get returned a value other than the one put")

// errMissing: a get found no value for a key that was put.
var errMissing = errors.New("bench: get found no value for a key that was put")

// get: each connection gets random keys of those put, checking each value.
func (p *putPhase) get(ctx context.Context, keys []putKey) *phaseRun {
	size := p.cfg.ValueSize
	if len(keys) == 0 {
		r := &phaseRun{}
		r.errs.add(errors.New("bench: no key was put: nothing to get"))
		return r
	}
	return p.each(ctx, "get", func(env *phaseEnv, w int, c kvConn, oc *opCounter, ec *errCounter) error {
		rng := newRand(p.cfg.Seed+1, w)
		for env.ctx.Err() == nil {
			k := keys[rng.IntN(len(keys))]
			start := time.Now()
			v, found, err := c.get(k.key)
			if err != nil {
				return err
			}
			d := time.Since(start)
			switch {
			case !found:
				ec.add(errMissing)
			case !bytes.Equal(v, p.pool[k.off:k.off+size]):
				ec.add(errWrongValue)
			default:
				oc.add(d, 1, size)
			}
		}
		return nil
	})
}
