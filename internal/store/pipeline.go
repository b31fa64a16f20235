package store

import (
	"fmt"
	"time"
)

// The commit pipeline orders the store's requests and hands them, in
// groups, to its commitEnv, which evaluates, persists and publishes them.
// The pipeline itself knows nothing of Pebble, the log or the roles: it
// decides only which requests share one durable commit and in what order
// the commits run, so it is tested with a fake environment
// (pipeline_test.go).
//
// Ordering rules: requests are committed in the order they were
// submitted; a lone request is committed at once, and requests arriving
// during a commit form the next group (bounded by MaxGroupBytes and
// maxGroupRequests); a snapshot install (reqReplace) and a segment
// compaction (reqCompact) run alone, after the requests gathered with
// them.

// commitEnv is what the pipeline drives. Each method answers every
// request it is given (sets its result or error and closes its done).
type commitEnv interface {
	// commit commits the requests as one group.
	commit(group []*request)
	// replace installs the ready snapshot (a reqReplace).
	replace(r *request)
	// lingered records how long the pipeline waited to gather a group.
	lingered(d time.Duration)
}

// pipeline is the single writer's loop.
type pipeline struct {
	reqs <-chan *request
	quit <-chan struct{}
	env  commitEnv
	// batchWindow and maxGroupBytes are the store's BatchWindow and
	// MaxGroupBytes.
	batchWindow   time.Duration
	maxGroupBytes int
}

const (
	// maxLinger caps the adaptive wait for returning writers.
	maxLinger = 500 * time.Microsecond
	// maxGroupRequests caps the requests of one durable commit.
	maxGroupRequests = 4096
)

// run commits requests until quit is closed, then fails those still
// queued with ErrClosed.
func (p *pipeline) run() {
	var group []*request
	// expect is how many requests the previous round involved: the group
	// it committed plus those that queued up during its commit. Writers
	// that wait for each acknowledgement come back right after it; with
	// BatchWindow 0 the pipeline lingers briefly for them (never for a
	// lone writer) so that concurrent writers share an fsync instead of
	// alternating.
	expect := 1
	var lastSync time.Duration
	for {
		group = group[:0]
		select {
		case r := <-p.reqs:
			group = append(group, r)
		case <-p.quit:
			p.failQueued(ErrClosed)
			return
		}
		group = p.gather(group, expect, lastSync)
		// A replace runs alone, after the requests gathered with it, and
		// so does a segment compaction (it frees retired blocks the
		// group's writes would count down).
		var replaces, compactions []*request
		n := 0
		for _, r := range group {
			if r.kind == reqReplace {
				replaces = append(replaces, r)
			} else if r.kind == reqCompact {
				compactions = append(compactions, r)
			} else {
				group[n] = r
				n++
			}
		}
		group = group[:n]
		if len(group) > 0 {
			syncStart := time.Now()
			p.env.commit(group)
			lastSync = time.Since(syncStart)
		}
		expect = len(group) + len(p.reqs)
		for _, r := range compactions {
			p.env.commit([]*request{r})
		}
		for _, r := range replaces {
			p.env.replace(r)
		}
	}
}

// gather adds to group the requests that join it: those already queued,
// and with a window, those arriving within it.
func (p *pipeline) gather(group []*request, expect int, lastSync time.Duration) []*request {
	size := group[0].size
	var window time.Duration
	switch {
	case p.batchWindow > 0:
		window = p.batchWindow
	case expect > 1:
		window = min(maxLinger, lastSync/2)
	}
	var deadline <-chan time.Time
	var timer *time.Timer
	lingerStart := time.Now()
gather:
	for size < p.maxGroupBytes && len(group) < maxGroupRequests {
		select {
		case r := <-p.reqs:
			group = append(group, r)
			size += r.size
			continue
		default:
		}
		if window <= 0 || (p.batchWindow == 0 && len(group) >= expect) {
			break
		}
		if timer == nil {
			timer = time.NewTimer(window)
			deadline = timer.C
		}
		select {
		case r := <-p.reqs:
			group = append(group, r)
			size += r.size
		case <-deadline:
			break gather
		case <-p.quit:
			break gather
		}
	}
	if timer != nil {
		timer.Stop()
		p.env.lingered(time.Since(lingerStart))
	}
	return group
}

func (p *pipeline) failQueued(err error) {
	for {
		select {
		case r := <-p.reqs:
			r.err = err
			close(r.done)
		default:
			return
		}
	}
}

// storeEnv is the store's commitEnv: its committer, reopened after each
// snapshot install. While the committer cannot be opened every request
// fails with ErrWriteFailed; each group tries to open it again, so a
// transient read error while opening it does not leave the store refusing
// writes until a restart.
type storeEnv struct {
	s       *Store
	c       *committer
	openErr error
	// newCommitter opens the committer (tests replace it).
	newCommitter func(*Store) (*committer, error)
}

func (e *storeEnv) open() {
	if e.newCommitter == nil {
		e.newCommitter = newCommitter
	}
	if e.c, e.openErr = e.newCommitter(e.s); e.openErr != nil {
		e.s.opts.Logger.Error("store cannot accept writes", "db", e.s.opts.Name, "err", e.openErr)
	}
}

// ready opens the committer if an earlier attempt failed.
func (e *storeEnv) ready() bool {
	if e.c == nil {
		e.open()
	}
	return e.c != nil
}

func (e *storeEnv) commit(group []*request) {
	if !e.ready() {
		e.fail(group)
		return
	}
	e.c.commit(group)
}

func (e *storeEnv) replace(r *request) {
	if !e.ready() {
		e.fail([]*request{r})
		return
	}
	r.err = e.s.replace()
	e.open()
	close(r.done)
}

func (e *storeEnv) fail(group []*request) {
	for _, r := range group {
		r.err = fmt.Errorf("%w: %v", ErrWriteFailed, e.openErr)
		close(r.done)
	}
}

func (e *storeEnv) lingered(d time.Duration) { e.s.m.lingerSeconds.Observe(d.Seconds()) }

// commitLoop runs the store's pipeline until Close.
func (s *Store) commitLoop() {
	defer close(s.stopped)
	env := &storeEnv{s: s}
	env.open()
	p := pipeline{reqs: s.reqs, quit: s.quit, env: env, batchWindow: s.opts.BatchWindow, maxGroupBytes: s.opts.MaxGroupBytes}
	p.run()
}
