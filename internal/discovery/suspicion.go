package discovery

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// SuspectAfter is how many direct probes in a row a member this one
// depends on must miss to be suspect. One answer clears it.
const SuspectAfter = 2

// dependencyReplicas is how many of the nearest full replicas of a
// proxy's database are checked: the pool's and as many again, so that
// the pool has checked members to fall back on.
const dependencyReplicas = 2 * DefaultPoolReplicas

// Dependencies are the members that the member marked Self in members
// fetches from, or may, and so checks directly: for each database it
// serves as a proxy, the other proxies of its data centre (its relays
// and peers) and the nearest full replicas; for each database it
// replicates, its current source (the first of its advertised path).
// Suspicion is ignored (a suspect member stays a dependency, so that it
// is seen answering again). Sorted by name, without duplicates; nil
// without a Self member. Pure.
func Dependencies(members []Member) []Member {
	var self *Member
	plain := make([]Member, len(members))
	byID := map[uint64]Member{}
	for i, m := range members {
		m.Suspect = false
		plain[i] = m
		byID[NodeID(m.Name)] = m
		if m.Self {
			self = &plain[i]
		}
	}
	if self == nil {
		return nil
	}
	deps := map[string]bool{}
	for _, d := range self.Meta.DBs {
		if d.Role.IsProxy() {
			for _, p := range ViewDC(plain, d.Name, self.Meta.DC, 0).Peers {
				deps[p.Name] = true
			}
			for _, r := range FullReplicas(plain, d.Name, d.ID, dependencyReplicas) {
				deps[r.Name] = true
			}
		}
		if len(d.Path) > 0 {
			if src, ok := byID[d.Path[0]]; ok && !src.Self {
				deps[src.Name] = true
			}
		}
	}
	var out []Member
	for _, m := range plain {
		if deps[m.Name] {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// checkDependencies probes this member's dependencies directly, every
// interval until ctx ends, and keeps count of the probes each missed in
// a row: memberlist keeps its own suspicion to itself.
func (o *Overlay) checkDependencies(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		o.checkOnce(o.probed(o.Members()))
	}
}

// Watch has this member probe the member named name, besides its
// Dependencies, until it answers one probe or leaves the overlay. An
// agent that leaves a suspect source watches it: otherwise the source,
// no longer a dependency, would be forgotten unanswered and look fit to
// choose again at once.
func (o *Overlay) Watch(name string) {
	o.mu.Lock()
	if _, live := o.mu.nodes[name]; live {
		o.mu.watched[name] = true
	}
	o.mu.Unlock()
}

// probed are the members to probe now: the dependencies of members,
// then the watched members that are not among them.
func (o *Overlay) probed(members []Member) []Member {
	deps := Dependencies(members)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range members {
		if o.mu.watched[m.Name] && !slices.ContainsFunc(deps, func(d Member) bool { return d.Name == m.Name }) {
			m.Suspect = false
			deps = append(deps, m)
		}
	}
	return deps
}

// checkOnce probes each of deps once, at the same time, and records the
// answers. Members that are no longer dependencies are forgotten.
func (o *Overlay) checkOnce(deps []Member) {
	answered := make([]bool, len(deps))
	var wg sync.WaitGroup
	for i, m := range deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answered[i] = o.probe(m)
		}()
	}
	wg.Wait()
	o.mu.Lock()
	suspects := 0
	misses := make(map[string]int, len(deps))
	for i, m := range deps {
		if _, live := o.mu.nodes[m.Name]; !live || answered[i] {
			delete(o.mu.watched, m.Name)
			continue // answered, or left while it was probed
		}
		misses[m.Name] = o.mu.misses[m.Name] + 1
		if misses[m.Name] >= SuspectAfter {
			suspects++
		}
	}
	if suspectsChanged(o.mu.misses, misses) {
		o.notifyChangeLocked()
	}
	o.mu.misses = misses
	o.m.suspects.Set(float64(suspects))
	o.mu.Unlock()
}

// suspectsChanged reports whether two counts of missed probes make
// different members suspect.
func suspectsChanged(before, after map[string]int) bool {
	for name, n := range before {
		if (n >= SuspectAfter) != (after[name] >= SuspectAfter) {
			return true
		}
	}
	for name, n := range after {
		if (n >= SuspectAfter) != (before[name] >= SuspectAfter) {
			return true
		}
	}
	return false
}

// probe pings member m once, directly (memberlist's probe timeout), and
// reports whether it answered.
func (o *Overlay) probe(m Member) bool {
	addr, err := net.ResolveUDPAddr("udp", m.Gossip)
	if err == nil {
		_, err = o.ml.Ping(m.Name, addr)
	}
	if err != nil {
		o.m.checks.WithLabelValues("missed").Inc()
		o.log.Debug("a member this node depends on missed a probe", "member", m.Name, "err", err)
		return false
	}
	o.m.checks.WithLabelValues("answered").Inc()
	return true
}
