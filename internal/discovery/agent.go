package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// Replica is what an Agent needs of the replica it steers.
type Replica interface {
	// Source is the replication address connected to now ("" if none);
	// streaming reports whether the session is past its handshake.
	Source() (addr string, streaming bool)
	// Applied is the replica's applied index, Lag its age.
	Applied() uint64
	Lag() time.Duration
	// Reconnect ends the current session; the replica asks Sources
	// again at once. Its own children are not touched.
	Reconnect()
	// SourcePath is the path the source sent over the stream: its own
	// id first, then its ancestors' as it knows them. Nil if none (not
	// streaming, or a source that does not send it).
	SourcePath() []uint64
}

// AgentConfig configures an Agent. Zero fields take their defaults.
type AgentConfig struct {
	// Database is the database's name; ID its id. Required.
	Database string
	ID       store.DBID
	// Role is RoleReplica or RoleProxy. A replica follows roots and
	// replicas; a proxy, proxies too.
	Role Role
	// Static: the replica has configured sources. The agent only reports
	// its position in the tree; it never moves it.
	Static bool
	// Policy tunes Choose.
	Policy Policy
	// Interval is how often the choice is reviewed. Default 1s.
	Interval time.Duration
	// StallAfter: a source whose replica has been lagging this long while
	// another member has newer entries counts as stalled. Default 10s.
	StallAfter time.Duration
	// AvoidFor: a source that failed or refused is not chosen again for
	// this long (unless nothing else is left). Default 10s.
	AvoidFor time.Duration
	// Sources is how many addresses Sources returns at most: the source
	// and its secondaries. Default 4.
	Sources int
}

func (c *AgentConfig) ensureDefaults() {
	c.Policy.EnsureDefaults()
	if c.Role == RoleRoot {
		c.Role = RoleReplica
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.StallAfter == 0 {
		c.StallAfter = 10 * time.Second
	}
	if c.AvoidFor == 0 {
		c.AvoidFor = 10 * time.Second
	}
	if c.Sources == 0 {
		c.Sources = 4
	}
}

// Agent chooses the sources of one replicated database of this process.
type Agent struct {
	cfg  AgentConfig
	o    *Overlay
	self uint64
	log  *slog.Logger

	mu struct {
		sync.Mutex
		avoid    map[string]time.Time // by address: until when
		suspect  string               // the source found suspect at the last review
		path     []uint64             // this node's path to the root (advertised)
		pathOf   string               // the source address path was learned from
		streamed string               // source address seen streaming last
		pending  Reason               // why the agent last moved the replica
		rtt      time.Duration        // estimated RTT to the source
		replica  Replica              // the replica Run steers
	}
}

// NewAgent returns an agent for one database; it steers nothing until Run.
func NewAgent(cfg AgentConfig, o *Overlay, log *slog.Logger) *Agent {
	cfg.ensureDefaults()
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{cfg: cfg, o: o, self: NodeID(o.Name()), log: log.With("component", "discovery", "db", cfg.Database)}
	a.mu.avoid = map[string]time.Time{}
	a.mu.rtt = -1
	return a
}

// Sources returns the replication addresses to try, in order: the chosen
// source, then its secondaries. Empty: no usable member is known yet.
func (a *Agent) Sources() []string {
	ch := a.choose("", false, false, nil)
	var out []string
	for _, c := range ch.Sources {
		if len(out) == a.cfg.Sources {
			break
		}
		out = append(out, c.Addr)
	}
	if len(out) == 0 {
		// Everything usable was avoided: try those again rather than
		// nothing.
		a.mu.Lock()
		clear(a.mu.avoid)
		a.mu.Unlock()
		for _, c := range a.choose("", false, false, nil).Sources {
			if len(out) < a.cfg.Sources {
				out = append(out, c.Addr)
			}
		}
	}
	return out
}

// Failed records that addr failed or refused this node (full, a broken
// stream, no answer): it is not chosen for a while.
func (a *Agent) Failed(addr string) {
	a.mu.Lock()
	a.mu.avoid[addr] = time.Now().Add(a.cfg.AvoidFor)
	a.mu.Unlock()
}

// Position is this node's depth and path to the root, as advertised:
// depth -1 while it is not attached.
func (a *Agent) Position() (depth int, path []uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.path == nil {
		return -1, nil
	}
	return len(a.mu.path), slices.Clone(a.mu.path)
}

// Errors of AcceptChild.
var (
	ErrDetached = errors.New("qs: this replica is between sources: it takes no new replica now")
	ErrCycle    = errors.New("qs: the replica asking is an ancestor of this node: it would form a cycle")
)

// AcceptChild says whether the member named child may start streaming
// from this node now, from the freshest view there is: the path this
// node's source sent over the stream, and that source's path as
// advertised by gossip. While the replica is between sources it takes no
// new child (ErrDetached: two detached nodes must not choose each other),
// nor an ancestor by either path (ErrCycle: the child's view of this
// node's path may be older than this node's move), nor anyone while it
// knows neither path (ErrCycle: its source is missing from its view of
// the overlay and sent no path). A static replica, or one not running
// yet, accepts.
func (a *Agent) AcceptChild(child string) error {
	a.mu.Lock()
	r := a.mu.replica
	a.mu.Unlock()
	if a.cfg.Static || r == nil {
		return nil
	}
	addr, streaming := r.Source()
	if !streaming {
		return ErrDetached
	}
	id := NodeID(child)
	if id == a.self {
		return ErrCycle
	}
	streamed := r.SourcePath()
	if slices.Contains(streamed, id) {
		return fmt.Errorf("%w (by the path its source sent)", ErrCycle)
	}
	cands, _ := candidates(a.o.Members(), a.cfg)
	for _, c := range cands {
		if c.Addr == addr {
			if NodeID(c.Name) == id || slices.Contains(c.Path, id) {
				return ErrCycle
			}
			return nil
		}
	}
	if len(streamed) > 0 {
		return nil
	}
	// The source is not in this node's view of the overlay (not gossiped
	// here yet, or just taken for dead, until the next review moves the
	// replica) and sent no path: the path last learned from that very
	// source decides, and without one the child may be an ancestor.
	a.mu.Lock()
	path, of := a.mu.path, a.mu.pathOf
	a.mu.Unlock()
	if of != addr {
		return fmt.Errorf("%w: this node's source %s is not in its view of the overlay, so its path is unknown", ErrCycle, addr)
	}
	if slices.Contains(path, id) {
		return ErrCycle
	}
	return nil
}

// SourceRTT is the estimated round trip to the current source; negative:
// unknown.
func (a *Agent) SourceRTT() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.rtt
}

// Run reviews the choice every Interval until ctx ends: it keeps this
// node's position current and, unless Static, moves the replica when
// Choose says so.
func (a *Agent) Run(ctx context.Context, r Replica) {
	a.mu.Lock()
	a.mu.replica = r
	a.mu.Unlock()
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		a.review(r)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// review is one round of Run.
func (a *Agent) review(r Replica) {
	addr, streaming := r.Source()
	members := a.o.Members()
	cands, roots := candidates(members, a.cfg)
	var cur *Candidate
	for i := range cands {
		if addr != "" && cands[i].Addr == addr {
			cur = &cands[i].Candidate
		}
	}
	// The path the source sent over the stream is fresher than the one it
	// advertises: it decides where it names the source and reaches a root
	// (a source whose own source sends no path sends only itself), or
	// holds this node (a cycle, broken below).
	var streamed []uint64
	if sp := r.SourcePath(); streaming && cur != nil && len(sp) > 0 && sp[0] == NodeID(cur.Name) &&
		(roots[sp[len(sp)-1]] || slices.Contains(sp, a.self)) {
		streamed = sp
		cur.Path = sp[1:]
		cur.Depth = len(cur.Path)
	}
	a.mu.Lock()
	// The current source counts as suspect once it was already suspect
	// at the previous review.
	suspect := cur != nil && cur.Suspect && a.mu.suspect == cur.Name
	a.mu.suspect = ""
	if cur != nil && cur.Suspect {
		a.mu.suspect = cur.Name
	}
	switch {
	case streaming && slices.Contains(streamed, a.self):
		// In a cycle until the move below: a path that reaches no root,
		// so nobody chooses this node while it lasts.
		a.mu.path, a.mu.pathOf = []uint64{NodeID(cur.Name)}, addr
		a.mu.rtt = cur.RTT
	case streaming && cur != nil:
		// This node hangs below cur: its path is cur's, one longer. (If
		// cur is detached, that is just [cur]: a path that reaches no
		// root, so nobody chooses this node while it lasts.)
		p := append([]uint64{NodeID(cur.Name)}, cur.Path...)
		a.mu.path, a.mu.pathOf = p[:min(len(p), maxPath-1)], addr
		a.mu.rtt = cur.RTT
	case !streaming:
		// Detached (between sources): advertise no path, so that no
		// one attaches below this node until it is attached again.
		a.mu.path, a.mu.pathOf, a.mu.rtt = nil, "", -1
	}
	if streaming && addr != a.mu.streamed {
		reason := a.mu.pending
		switch {
		case reason != ReasonNone:
		case a.mu.streamed == "":
			reason = ReasonInitial
		default:
			reason = ReasonFailed
		}
		a.o.m.sourceChanges.WithLabelValues(a.cfg.Database, string(reason)).Inc()
		a.log.Info("replication source", "source", addr, "reason", string(reason))
		a.mu.streamed, a.mu.pending = addr, ReasonNone
	}
	depth, rtt := len(a.mu.path), a.mu.rtt
	if a.mu.path == nil {
		depth = -1
	}
	a.mu.Unlock()
	a.o.m.depth.WithLabelValues(a.cfg.Database).Set(float64(depth))
	fromStream := 0.0
	if streamed != nil && !slices.Contains(streamed, a.self) {
		fromStream = 1
	}
	a.o.m.pathStreamed.WithLabelValues(a.cfg.Database).Set(fromStream)
	a.o.m.sourceRTT.WithLabelValues(a.cfg.Database).Set(rtt.Seconds())

	if a.cfg.Static || !streaming {
		// Not streaming: the replica is already working through its
		// sources, and asks Sources before each attempt.
		return
	}
	if cur == nil {
		// Streaming from a member the overlay no longer lists.
		a.move(r, ReasonDead, addr)
		return
	}
	stalled := r.Lag() > a.cfg.StallAfter && slices.ContainsFunc(cands, func(c candidate) bool { return c.applied > r.Applied() })
	ch := a.choose(cur.Name, stalled, suspect, streamed)
	if ch.Move && len(ch.Sources) > 0 && ch.Sources[0].Addr != addr {
		if ch.Reason == ReasonSuspect {
			// Probed until it answers, it stays suspect (and last)
			// after it stops being this node's source.
			a.o.Watch(cur.Name)
		}
		a.move(r, ch.Reason, addr)
	}
}

func (a *Agent) move(r Replica, reason Reason, from string) {
	a.mu.Lock()
	a.mu.pending = reason
	a.mu.Unlock()
	a.log.Info("moving to another replication source", "from", from, "reason", string(reason))
	r.Reconnect()
}

// choose runs Choose on the current member list; current names the
// source streamed from now, stalled and suspect say how it is doing, and
// streamed is the path it sent over the stream, if that decides (its id
// first; nil: its advertised path decides).
func (a *Agent) choose(current string, stalled, suspect bool, streamed []uint64) Choice {
	members := a.o.Members()
	cands, roots := candidates(members, a.cfg)
	in := Input{Self: a.self, Current: current, CurrentStalled: stalled, Members: roots, Avoid: map[string]bool{}, Policy: a.cfg.Policy}
	now := time.Now()
	a.mu.Lock()
	for addr, until := range a.mu.avoid {
		if now.After(until) {
			delete(a.mu.avoid, addr)
			continue
		}
		for _, c := range cands {
			if c.Addr == addr {
				in.Avoid[c.Name] = true
			}
		}
	}
	a.mu.Unlock()
	for _, c := range cands {
		if c.Name == current {
			c.Suspect = suspect
			if len(streamed) > 0 {
				c.Path, c.Depth = streamed[1:], len(streamed)-1
			}
		}
		in.Candidates = append(in.Candidates, c.Candidate)
	}
	return Choose(in)
}

// candidate is a Candidate with what only the agent looks at.
type candidate struct {
	Candidate
	applied uint64
}

// candidates picks the members that serve cfg's database, and maps every
// live member's id to whether it is a root of it.
func candidates(members []Member, cfg AgentConfig) ([]candidate, map[uint64]bool) {
	roots := make(map[uint64]bool, len(members))
	var out []candidate
	for _, m := range members {
		id := NodeID(m.Name)
		if _, ok := roots[id]; !ok {
			roots[id] = false
		}
		for _, d := range m.Meta.DBs {
			if d.Name != cfg.Database || d.ID != cfg.ID {
				continue
			}
			if d.Role == RoleRoot {
				roots[id] = true
			}
			if m.Self || m.Meta.Repl == "" || d.Role.IsProxy() && !cfg.Role.IsProxy() {
				continue
			}
			out = append(out, candidate{Candidate: Candidate{Name: m.Name, Addr: m.Meta.Repl, RTT: m.RTT, Root: d.Role == RoleRoot,
				Depth: d.Depth, Path: d.Path, Children: d.Children, MaxChildren: d.MaxChildren, Suspect: m.Suspect}, applied: d.Applied})
		}
	}
	return out, roots
}
