package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Logf prints progress. It must be safe for concurrent use.
type Logf func(format string, args ...any)

// reconnectPause is how long a worker waits after a failed connect before
// trying again, so that a dead server does not turn into a busy loop.
const reconnectPause = 20 * time.Millisecond

// phaseEnv is the clock of one phase. run is the context of the whole run,
// canceled when the run is interrupted; ctx ends when the phase does.
// Workers stop starting requests when ctx ends and let the request in
// flight finish, within the request timeout; an interrupt aborts it.
type phaseEnv struct {
	run     context.Context
	ctx     context.Context
	cancel  context.CancelFunc
	begin   time.Time
	end     time.Time
	timeout time.Duration
}

func newPhaseEnv(run context.Context, cfg *Config) *phaseEnv {
	return &phaseEnv{run: run, timeout: cfg.Timeout}
}

// interrupted reports whether the run was canceled; errors seen after
// that are the interruption's, not the server's.
func (e *phaseEnv) interrupted() bool { return e.run.Err() != nil }

// work starts the phase clock, runs n workers for d and waits for all of
// them. It returns the measured wall time.
func (e *phaseEnv) work(d time.Duration, n int, worker func(i int)) time.Duration {
	e.begin = time.Now()
	e.end = e.begin.Add(d)
	e.ctx, e.cancel = context.WithDeadline(e.run, e.end)
	defer e.cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { worker(i) })
	}
	wg.Wait()
	return time.Since(e.begin)
}

// mcSession owns a worker's memcache connection during a phase: it bounds
// its I/O by the end of the phase plus the request timeout, aborts it when
// the run is interrupted, and redials after an error that broke it.
type mcSession struct {
	addr  string
	env   *phaseEnv
	c     *mcConn
	armed bool
	stop  func() bool
	// blocking asks for a connection read with blocking system calls
	// (blockingConn); where that is not possible, it is an ordinary one.
	blocking bool
}

// dial connects ahead of the phase clock, so that the first request does
// not pay for the connection.
func (s *mcSession) dial() error {
	if s.c != nil {
		return nil
	}
	c, err := dialMC(s.env.run, s.addr)
	if err != nil {
		return errDial{err}
	}
	if s.blocking {
		if bc, err := newBlockingConn(c.conn); err == nil {
			c = newMCConn(bc)
		}
	}
	s.c = c
	return nil
}

// conn returns the connection, dialing it if needed. Call it only while
// the phase clock runs.
func (s *mcSession) conn() (*mcConn, error) {
	if err := s.dial(); err != nil {
		return nil, err
	}
	if !s.armed {
		c := s.c
		if err := c.conn.SetDeadline(s.env.end.Add(s.env.timeout)); err != nil {
			s.close()
			return nil, errDial{err}
		}
		s.stop = context.AfterFunc(s.env.run, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
		s.armed = true
	}
	return s.c, nil
}

// failed records err and drops the connection if err broke it. It returns
// false if the run was interrupted, in which case err is not counted.
func (s *mcSession) failed(err error, ec *errCounter) bool {
	if s.env.interrupted() {
		return false
	}
	ec.add(err)
	if s.c != nil && s.c.broken {
		s.close()
	}
	if s.c == nil {
		// A failed connect or a broken connection: pause before the next
		// attempt, so that a failing server does not get a connection
		// storm.
		sleepCtx(s.env.ctx, reconnectPause)
	}
	return true
}

func (s *mcSession) close() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
	s.armed = false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// scenarioRun runs the phases of one scenario, alternating targets within
// each phase so that every target sees the same machine conditions.
type scenarioRun struct {
	cfg     *Config
	res     *Result
	targets []*Target
	skipped map[*Target]bool
	logf    Logf
}

func newScenarioRun(cfg *Config, name, desc string, targets []*Target, logf Logf) *scenarioRun {
	return &scenarioRun{
		cfg:     cfg,
		res:     &Result{Scenario: name, Description: desc},
		targets: targets,
		skipped: map[*Target]bool{},
		logf:    logf,
	}
}

// skip leaves t out of the rest of the scenario, with a note saying why.
func (s *scenarioRun) skip(t *Target, format string, args ...any) {
	s.skipped[t] = true
	s.note("%s: skipped: %s", t.Name, fmt.Sprintf(format, args...))
}

// fail leaves t out of the rest of the scenario because it failed: the
// report lists it as a failure.
func (s *scenarioRun) fail(t *Target, format string, args ...any) {
	s.skipped[t] = true
	msg := fmt.Sprintf("%s: %s", t.Name, fmt.Sprintf(format, args...))
	if exit := t.alive(); exit != nil && !strings.Contains(msg, exit.Error()) {
		msg += "; " + exit.Error()
	}
	s.res.Failures = append(s.res.Failures, msg)
	s.logf("%s: FAILED: %s", s.res.Scenario, msg)
}

func (s *scenarioRun) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.res.Notes = append(s.res.Notes, msg)
	s.logf("%s: %s", s.res.Scenario, msg)
}

func (s *scenarioRun) active() []*Target {
	var out []*Target
	for _, t := range s.targets {
		if !s.skipped[t] {
			out = append(out, t)
		}
	}
	return out
}

// phaseRun is what one target did in one slice of a phase: the raw
// counters, merged over the slices before any percentile is taken.
type phaseRun struct {
	ops     []namedOps // in report order
	errs    errCounter
	elapsed time.Duration
}

type namedOps struct {
	op string
	c  *opCounter
}

// add records the counter of one kind of request.
func (r *phaseRun) add(op string, c *opCounter) { r.ops = append(r.ops, namedOps{op, c}) }

// merge adds o's counters to r's.
func (r *phaseRun) merge(o *phaseRun) {
	for _, n := range o.ops {
		found := false
		for _, m := range r.ops {
			if m.op == n.op {
				m.c.merge(n.c)
				found = true
			}
		}
		if !found {
			c := newOpCounter()
			c.merge(n.c)
			r.add(n.op, c)
		}
	}
	r.errs.merge(&o.errs)
	r.elapsed += o.elapsed
}

// phase summarizes r.
func (r *phaseRun) phase() Phase {
	ph := Phase{Seconds: r.elapsed.Seconds()}
	for _, n := range r.ops {
		ph.Ops = append(ph.Ops, n.c.stats(n.op, r.elapsed))
	}
	ph.setErrors(&r.errs)
	return ph
}

// phaseRunner runs slice `slice` of phase i against t for d.
type phaseRunner func(t *Target, i, slice int, d time.Duration) *phaseRun

// phases runs every phase against every active target. Each phase is cut
// into cfg.Slices slices that the targets take in turns (qs, memcached,
// qs, memcached, ...), so that a change in the rest of the machine's load
// during the phase reaches every target alike; each target's slices are
// merged into its phase. A phase cut short by an interrupt is dropped, and
// so is the phase of a target that failed during it.
func (s *scenarioRun) phases(ctx context.Context, names []string, run phaseRunner) error {
	nslices := max(1, s.cfg.Slices)
	for i, name := range names {
		accs := map[*Target]*phaseAcc{}
		order := s.active()
		for k := range nslices {
			d := s.cfg.Duration / time.Duration(nslices)
			if k == nslices-1 {
				d = s.cfg.Duration - d*time.Duration(nslices-1)
			}
			for _, t := range s.active() {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := t.alive(); err != nil {
					s.fail(t, "%v", err)
					continue
				}
				if nslices == 1 {
					s.logf("%s: %s on %s for %s", s.res.Scenario, name, t.Name, d)
				} else {
					s.logf("%s: %s on %s for %s (slice %d of %d)", s.res.Scenario, name, t.Name, d, k+1, nslices)
				}
				a := accs[t]
				if a == nil {
					a = &phaseAcc{}
					accs[t] = a
				}
				if t.Spawned {
					a.syncs = append(a.syncs, probeFsync(s.workDir()))
				}
				engineBefore := sampleEngine(ctx, t.HTTP, s.cfg.DB)
				before := sampleCPU(t.pid(), t.belowPids())
				r := run(t, i, k, d)
				if err := ctx.Err(); err != nil {
					return err
				}
				c := cpuBetween(before, sampleCPU(t.pid(), t.belowPids()))
				if e, ok := engineBetween(engineBefore, sampleEngine(ctx, t.HTTP, s.cfg.DB)); ok {
					if a.engine == nil {
						a.engine = &PhaseEngine{}
					}
					a.engine.add(e)
				}
				a.cpu.Server += c.Server
				a.cpu.Client += c.Client
				a.cpu.Machine += c.Machine
				a.addHops(c.Hops)
				a.run.merge(r)
			}
		}
		for _, t := range order {
			a := accs[t]
			if a == nil || s.skipped[t] {
				continue
			}
			ph := a.run.phase()
			ph.CPU = a.cpu
			if !a.hopsLost {
				ph.CPU.Hops = a.hops
			}
			ph.Engine = a.engine
			for _, op := range ph.Ops {
				ph.CPU.Ops += op.Ops
			}
			if len(a.syncs) > 0 {
				slices.Sort(a.syncs)
				ph.DiskSyncMicros = float64(a.syncs[len(a.syncs)/2]) / 1e3
			}
			ph.Name, ph.Target, ph.Baseline = name, t.Name, t.Baseline
			s.res.Phases = append(s.res.Phases, ph)
			s.logf("%s: %s on %s: %s", s.res.Scenario, name, t.Name, phaseLine(&ph))
		}
	}
	return nil
}

// phaseAcc accumulates one target's slices of a phase.
type phaseAcc struct {
	run      phaseRun
	cpu      PhaseCPU
	syncs    []time.Duration
	engine   *PhaseEngine
	hops     []float64 // CPU seconds of the processes below a chain's root
	hopsLost bool      // a slice could not read them: the sum is not whole
	slices   int
}

// addHops adds one slice's CPU time of the processes below a chain's
// root (none for other targets).
func (a *phaseAcc) addHops(h []float64) {
	a.slices++
	switch {
	case a.hopsLost:
	case a.slices == 1:
		a.hops = h
	case len(h) != len(a.hops):
		a.hopsLost = true
	default:
		for i := range h {
			a.hops[i] += h[i]
		}
	}
}

// finish computes the ratios and returns the result.
func (s *scenarioRun) finish(err error) (*Result, error) {
	s.res.Ratios = computeRatios(s.res.Phases)
	return s.res, err
}

// randomBytes returns n bytes from a PCG seeded with seed.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func newRand(seed uint64, stream int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(stream)+1))
}

// workDir is where spawned servers keep their data.
func (s *scenarioRun) workDir() string {
	if s.cfg.WorkDir != "" {
		return s.cfg.WorkDir
	}
	return os.TempDir()
}
