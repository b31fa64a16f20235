package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Propagation measures how long a change takes to become readable two
// hops down a replication chain, durable at each hop: a qs chain (root →
// intermediate → leaf, `qs serve --upstream`) and a Redis chain (three
// redis-server with appendfsync always, chained with replicaof, the
// baseline), both started by the scenario. One writer sets a key at the
// root at cfg.PropagationRate writes/s and, after each acknowledgement,
// gets the key on the leaf until it reads the new value. "write" is the
// root's acknowledgement; "visible" is from sending the write to reading
// it on the leaf. The scenario's other targets are not used.
func Propagation(ctx context.Context, cfg Config, targets []*Target, logf Logf) (*Result, error) {
	desc := fmt.Sprintf("one writer sets a %d-byte value at a chain's root at %d writes/s and reads it back on the leaf two hops down, durable at each hop (qs: root → intermediate → leaf; Redis with appendfsync always and replicaof); %s per phase",
		cfg.ValueSize, cfg.PropagationRate, cfg.Duration)
	s := newScenarioRun(&cfg, ScenarioPropagation, desc, targets, logf)
	for _, t := range targets {
		s.skip(t, "the propagation scenario measures the chains it starts")
	}
	chains := map[*Target][]*Target{} // by root
	var started []*Target
	defer func() { stopAll(started) }()
	startChain := func(spawn func(prev *Target, hop int) (*Target, error)) {
		var chain []*Target
		for hop := range 3 {
			var prev *Target
			if hop > 0 {
				prev = chain[hop-1]
			}
			t, err := spawn(prev, hop)
			if err != nil {
				s.note("chain left out: %v", err)
				stopAll(chain)
				return
			}
			chain = append(chain, t)
		}
		started = append(started, chain...)
		root := chain[0]
		root.Name = root.Name + " chain"
		below := chain[1:]
		root.below = &below
		chains[root] = chain
		s.addTargets(root)
	}
	replAddr := map[*Target]string{}
	startChain(func(prev *Target, hop int) (*Target, error) {
		extra := []string{"--repl", "127.0.0.1:0"}
		if prev != nil {
			extra = append(extra, "--upstream", replAddr[prev])
		}
		t, found, err := spawnQSWith(ctx, cfg.QSBin, cfg.QSConfig, cfg.WorkDir, cfg.SpawnTimeout, extra...)
		if err != nil {
			return nil, err
		}
		replAddr[t] = found["repl"]
		if replAddr[t] == "" {
			StopTarget(t)
			return nil, fmt.Errorf("qs printed no replication listener")
		}
		return t, nil
	})
	startChain(func(prev *Target, hop int) (*Target, error) {
		of := ""
		if prev != nil {
			of = prev.Redis
		}
		t, err := spawnRedis(ctx, &cfg, "redis", of)
		if t != nil && hop == 0 {
			t.Baseline = true
		}
		return t, err
	})
	for root, chain := range chains {
		if err := waitChain(ctx, &cfg, chain); err != nil {
			s.fail(root, "%v", err)
		}
	}
	runID := fmt.Sprintf("%08x", rand.Uint32())
	err := s.phases(ctx, []string{"2 hops"}, func(t *Target, i, slice int, d time.Duration) *phaseRun {
		ch := chains[t]
		return propagate(ctx, &cfg, t, ch[len(ch)-1], fmt.Sprintf("%s-%d", runID, slice), d)
	})
	return s.finish(err)
}

// waitChain waits until a write at the chain's root is readable on its
// leaf: the chain is connected.
func waitChain(ctx context.Context, cfg *Config, chain []*Target) error {
	root, leaf := chain[0], chain[len(chain)-1]
	r, err := dialKV(ctx, root, kvAddr(root), cfg.Timeout)
	if err != nil {
		return err
	}
	defer r.Close()
	l, err := dialKV(ctx, leaf, kvAddr(leaf), cfg.Timeout)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := r.set("chain-ready", []byte("1")); err != nil {
		return err
	}
	deadline := time.Now().Add(cfg.SpawnTimeout)
	for {
		if _, found, err := l.get("chain-ready"); err == nil && found {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			err := fmt.Errorf("a write at the root was not readable on the leaf within %s", cfg.SpawnTimeout)
			for i, t := range chain {
				if t.proc != nil {
					err = fmt.Errorf("%w; hop %d's output:\n%s", err, i, indent(t.proc.Output()))
				}
			}
			return err
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// kvAddr is the address dialKV needs for t.
func kvAddr(t *Target) string {
	switch {
	case t.Etcd != "":
		return t.Etcd
	case t.Redis != "":
		return t.Redis
	}
	return t.Memcache
}

// propagate runs the writer of one slice: set at root, then get on leaf
// until the value is there.
func propagate(ctx context.Context, cfg *Config, root, leaf *Target, prefix string, d time.Duration) *phaseRun {
	env := newPhaseEnv(ctx, cfg)
	write, visible := newOpCounter(), newOpCounter()
	r := &phaseRun{}
	r.elapsed = env.work(d, 1, func(int) {
		w, err := dialKV(env.ctx, root, kvAddr(root), cfg.Timeout)
		if err != nil {
			r.errs.add(err)
			return
		}
		defer w.Close()
		l, err := dialKV(env.ctx, leaf, kvAddr(leaf), cfg.Timeout)
		if err != nil {
			r.errs.add(err)
			return
		}
		defer l.Close()
		tick := time.NewTicker(time.Second / time.Duration(cfg.PropagationRate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-env.ctx.Done():
				return
			case <-tick.C:
			}
			key := fmt.Sprintf("pg-%d", i%1000)
			val := fmt.Appendf(nil, "%s-%d-", prefix, i)
			for len(val) < cfg.ValueSize {
				val = append(val, 'v')
			}
			start := time.Now()
			if err := w.set(key, val); err != nil {
				r.errs.add(err)
				return
			}
			write.add(time.Since(start), 1, len(val))
			for {
				v, found, err := l.get(key)
				if err != nil {
					r.errs.add(err)
					return
				}
				if found && bytes.Equal(v, val) {
					visible.add(time.Since(start), 1, len(val))
					break
				}
				if time.Since(start) > cfg.Timeout {
					r.errs.add(fmt.Errorf("bench: write %d not readable on the leaf within %s", i, cfg.Timeout))
					break
				}
			}
		}
	})
	r.add("write", write)
	r.add("visible", visible)
	return r
}
