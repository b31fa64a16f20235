package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// scenarioFuncs maps scenario names to their functions.
var scenarioFuncs = map[string]func(context.Context, Config, []*Target, Logf) (*Result, error){
	ScenarioReadLat:     ReadLat,
	ScenarioGet:         Get,
	ScenarioWrite:       Write,
	ScenarioGetPut:      GetPut,
	ScenarioPropagation: Propagation,
	ScenarioTiers:       Tiers,
}

// ownServers are the scenarios that start every server they measure:
// no qs or baseline is spawned for them.
var ownServers = map[string]bool{ScenarioTiers: true}

// Run runs the scenarios against every target and returns the report.
// command is the command line, recorded in the report.
//
// With cfg.Spawn, every scenario gets a fresh qs server (with an empty data
// directory) and a fresh memcached, started before it and stopped after
// it: a scenario's numbers then do not depend on what ran before it (the
// readlat writers fill memcached's memory, and evictions would show up as
// misses in get; they also leave qs compaction work behind).
//
// If ctx is canceled (Ctrl-C), Run stops the spawned servers and returns
// what was measured so far with ctx's error. Failed requests do not make
// Run fail: they are counted in the report (Report.Errors).
func Run(ctx context.Context, cfg Config, command string, logf Logf) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Command: command, Started: time.Now().UTC(), Machine: ThisMachine(), Config: cfg}
	var err error
	for _, name := range cfg.Scenarios {
		var targets []*Target
		var res *Result
		if ownServers[name] {
			targets = nil
		} else {
			targets, err = setUp(ctx, &cfg, rep, logf)
		}
		if err == nil {
			res, err = scenarioFuncs[name](ctx, cfg, targets, logf)
		}
		for _, t := range targets {
			if t.proc == nil {
				continue
			}
			if exit := t.proc.Exited(); exit != nil {
				rep.warn(logf, "%s: spawned server died during the %s scenario: %v", t.Name, name, exit)
			}
			if serr := t.proc.Stop(); serr != nil {
				logf("stop %s: %v", t.Name, serr)
			}
		}
		if res != nil {
			for _, t := range targets {
				res.Targets = append(res.Targets, *t)
			}
			rep.Results = append(rep.Results, *res)
		}
		for _, t := range targets {
			if !slices.ContainsFunc(rep.Targets, func(x Target) bool { return x.Name == t.Name }) {
				rep.Targets = append(rep.Targets, *t)
			}
		}
		if err != nil {
			break
		}
	}
	if err != nil && ctx.Err() != nil {
		rep.Interrupted = true
	}
	return rep, err
}

// setUp returns the targets of one scenario: the spawned servers, if any,
// and the configured ones, with the baseline marked and versions asked.
// On error it has stopped whatever it started.
func setUp(ctx context.Context, cfg *Config, rep *Report, logf Logf) (targets []*Target, err error) {
	var baseline *Target
	defer func() {
		if err != nil {
			for _, t := range targets {
				StopTarget(t)
			}
			if baseline != nil {
				StopTarget(baseline)
			}
			targets = nil
		}
	}()
	if cfg.Spawn {
		if !cfg.NoBaseline {
			baseline, err = SpawnMemcached(ctx, cfg.MemcachedBin, cfg.MemcachedMemMB, cfg.SpawnTimeout)
			if err != nil {
				return nil, fmt.Errorf("spawn the memcached baseline: %w", err)
			}
			logf("spawned memcached: memcache %s", baseline.Memcache)
		}
		qs, err := SpawnQS(ctx, cfg.QSBin, cfg.QSConfig, cfg.WorkDir, cfg.SpawnTimeout)
		if err != nil {
			return nil, fmt.Errorf("spawn qs: %w", err)
		}
		targets = append(targets, qs)
		logf("spawned qs: memcache %s, http %s, data in %s", qs.Memcache, qs.HTTP, qs.proc.dir)
		if w := tmpfsWarning(cfg.WorkDir); w != "" {
			rep.warn(logf, "%s", w)
		}
	}
	for _, t := range cfg.Targets {
		targets = append(targets, &t) // a copy per iteration
	}
	if baseline != nil {
		targets = append(targets, baseline) // last: qs runs first in each phase
		baseline = nil                      // now in targets
	}
	found := false
	for _, t := range targets {
		if t.Name == cfg.Baseline {
			t.Baseline = true
			found = true
		}
	}
	if !found && len(targets) > 1 {
		rep.warn(logf, "no target is named %q: no ratios (name the baseline with --baseline)", cfg.Baseline)
	}
	for _, t := range targets {
		if t.Memcache == "" {
			continue
		}
		verr := withConn(ctx, t.Memcache, 2*time.Second, func(c *mcConn) error {
			v, err := c.version()
			t.Version = v
			return err
		})
		if err := ctx.Err(); err != nil {
			return targets, err
		}
		if verr != nil {
			logf("%s: no answer to the memcache version command: %v", t.Name, verr)
		}
	}
	return targets, nil
}

// warn adds a warning to the report, once.
func (r *Report) warn(logf Logf, format string, args ...any) {
	w := fmt.Sprintf(format, args...)
	if !slices.Contains(r.Warnings, w) {
		r.Warnings = append(r.Warnings, w)
		logf("warning: %s", w)
	}
}
