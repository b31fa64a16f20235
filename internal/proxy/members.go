package proxy

import (
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// errRetired: the member left the pool after it was picked; the request
// is asked elsewhere.
var errRetired = errors.New("qs: member left the pool")

// plannedMember is an address and its tier.
type plannedMember struct {
	addr     string
	fallback bool
}

// memberPlan is how a pool's members change: the addresses to add, those
// to retire, and those kept whose tier changes.
type memberPlan struct {
	add    []plannedMember
	retire []string
	retier []plannedMember
}

func (p memberPlan) empty() bool { return len(p.add)+len(p.retire)+len(p.retier) == 0 }

// planMembers turns the members now (cur) into preferred then fallback:
// an address named twice is taken once, preferred if named so; empty
// addresses are ignored. Added members keep the order given, preferred
// first; retired ones the order of cur. Pure.
func planMembers(cur []plannedMember, preferred, fallback []string) memberPlan {
	want := map[string]bool{} // address → fallback
	var order []string
	for _, a := range preferred {
		if _, ok := want[a]; !ok && a != "" {
			want[a] = false
			order = append(order, a)
		}
	}
	for _, a := range fallback {
		if _, ok := want[a]; !ok && a != "" {
			want[a] = true
			order = append(order, a)
		}
	}
	var plan memberPlan
	have := map[string]bool{}
	for _, m := range cur {
		have[m.addr] = true
		switch fb, ok := want[m.addr]; {
		case !ok:
			plan.retire = append(plan.retire, m.addr)
		case fb != m.fallback:
			plan.retier = append(plan.retier, plannedMember{m.addr, fb})
		}
	}
	for _, a := range order {
		if !have[a] {
			plan.add = append(plan.add, plannedMember{a, want[a]})
		}
	}
	return plan
}

// SetMembers makes preferred and fallback the pool's members: new
// addresses join, those kept move to the tier named, and those no longer
// named are retired. A retired member takes no new request; the requests
// it is answering finish (a request it can no longer take is asked
// elsewhere), then its connections close and its metric series are
// deleted. Reads in flight do not fail. It reports whether anything
// changed.
func (p *Pool) SetMembers(preferred, fallback []string) bool {
	p.memberMu.Lock()
	defer p.memberMu.Unlock()
	if p.closed() {
		return false
	}
	cur := p.snapshot()
	plan := planMembers(currentPlan(cur), preferred, fallback)
	if plan.empty() {
		return false
	}
	db, changes := p.cfg.Database, p.cfg.Metrics.memberChanges
	byAddr := map[string]*member{}
	for _, m := range cur {
		byAddr[m.addr] = m
	}
	for _, r := range plan.retier {
		byAddr[r.addr].fallback.Store(r.fallback)
		changes.WithLabelValues(db, "retiered").Inc()
	}
	retired := map[*member]bool{}
	for _, a := range plan.retire {
		m := byAddr[a]
		retired[m] = true
		p.draining[a] = m
		changes.WithLabelValues(db, "retired").Inc()
	}
	next := slices.DeleteFunc(slices.Clone(cur), func(m *member) bool { return retired[m] })
	for _, a := range plan.add {
		m := p.draining[a.addr]
		if m == nil || !m.revive() {
			m = p.newMember(a.addr, a.fallback)
		}
		delete(p.draining, a.addr)
		m.fallback.Store(a.fallback)
		next = append(next, m)
		changes.WithLabelValues(db, "added").Inc()
	}
	p.members.Store(&next)
	p.setMemberGauges(next)
	p.log.Info("pool members changed", "added", len(plan.add), "retired", len(plan.retire), "retiered", len(plan.retier),
		"preferred", preferred, "fallback", fallback)
	// Outside the lock of each member: retire closes the member at once
	// when it answers nothing now.
	for m := range retired {
		m.retire()
	}
	return true
}

func currentPlan(ms []*member) []plannedMember {
	out := make([]plannedMember, len(ms))
	for i, m := range ms {
		out[i] = plannedMember{m.addr, m.fallback.Load()}
	}
	return out
}

// setMemberGauges sets the members gauges of each tier.
func (p *Pool) setMemberGauges(ms []*member) {
	n := 0
	for _, m := range ms {
		if m.fallback.Load() {
			n++
		}
	}
	p.cfg.Metrics.members.WithLabelValues(p.cfg.Database, "preferred").Set(float64(len(ms) - n))
	p.cfg.Metrics.members.WithLabelValues(p.cfg.Database, "fallback").Set(float64(n))
}

// begin admits a request to the member; false if it is retired.
func (m *member) begin() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return false
	}
	m.active++
	return true
}

// end ends a request begun; the last one of a retired member closes it.
func (m *member) end() {
	m.mu.Lock()
	m.active--
	last := m.retired && m.active == 0
	m.mu.Unlock()
	if last {
		m.finish()
	}
}

// retire takes the member out of service; it closes at once if it answers
// nothing now, else after its last request. Called by SetMembers with
// memberMu held.
func (m *member) retire() {
	m.mu.Lock()
	m.retired = true
	idle := m.active == 0
	m.mu.Unlock()
	if idle {
		m.finishLocked()
	}
}

// revive brings a retired member that is still draining back into
// service (its address was named again); false if it has finished.
// Called with memberMu held.
func (m *member) revive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished {
		return false
	}
	m.retired = false
	return true
}

// finish closes a retired member that answers nothing any more.
func (m *member) finish() {
	m.p.memberMu.Lock()
	defer m.p.memberMu.Unlock()
	m.finishLocked()
}

// finishLocked is finish with memberMu held: unless the member was
// revived (or already finished), it closes its connections, leaves the
// draining set and deletes its metric series.
func (m *member) finishLocked() {
	m.mu.Lock()
	done := m.retired && m.active == 0 && !m.finished
	if done {
		m.finished = true
	}
	m.mu.Unlock()
	if !done {
		return
	}
	if m.p.draining[m.addr] == m {
		delete(m.p.draining, m.addr)
	}
	m.closeConns()
	db, mt := m.p.cfg.Database, m.p.cfg.Metrics
	mt.replicaUp.DeleteLabelValues(db, m.addr)
	mt.replicaLatency.DeleteLabelValues(db, m.addr)
	mt.replicaApplied.DeleteLabelValues(db, m.addr)
	mt.replicaRequests.DeletePartialMatch(prometheus.Labels{"db": db, "replica": m.addr})
}
