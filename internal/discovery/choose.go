package discovery

import (
	"cmp"
	"slices"
	"time"
)

// Reason says why a replica's source changes. The values label the
// source_changes_total metric.
type Reason string

const (
	ReasonNone    Reason = ""        // keep the current source
	ReasonInitial Reason = "initial" // no source yet
	ReasonDead    Reason = "dead"    // the source left the overlay
	ReasonStalled Reason = "stalled" // the source stopped delivering entries others have
	ReasonFailed  Reason = "failed"  // connecting to or streaming from the source failed
	ReasonCycle   Reason = "cycle"   // the source's path to the root contains this node
	ReasonSlower  Reason = "slower"  // another candidate is much nearer (see Policy)
	ReasonSuspect Reason = "suspect" // the source misses this node's probes; another does not
)

// Candidate is a member that serves the database, as Choose sees it.
type Candidate struct {
	Name string
	// Addr is its replication address.
	Addr string
	// RTT is the estimated round trip to it; negative: no estimate yet.
	RTT time.Duration
	// Root: it is the database's root (Depth 0, empty Path).
	Root bool
	// Depth is its distance to the root in hops.
	Depth int
	// Path holds the ids (NodeID) of its ancestors, its source first and
	// the root last; len(Path) == Depth.
	Path []uint64
	// Children streaming from it now, and its limit (0: none advertised).
	Children, MaxChildren int
	// Suspect: it missed this node's last direct probes (Member.Suspect).
	// The agent marks the current source suspect only once it has been
	// so at two reviews in a row.
	Suspect bool
}

// Policy holds the tunables of Choose. Zero fields take their defaults
// (EnsureDefaults).
type Policy struct {
	// TieRTT: candidates whose costs (RTT plus TierCost per tier) fall in
	// the same TieRTT-wide bucket count as equally near, and the shallower
	// one is preferred. Default 2ms.
	TieRTT time.Duration
	// TierCost is added to a candidate's RTT for each tier between it and
	// the root: every hop delays each entry, so a deep candidate must be
	// that much nearer to win (and RTT noise does not chain nodes into
	// long paths). Default 5ms.
	TierCost time.Duration
	// SwitchRatio and SwitchMin are the hysteresis of a move to a nearer
	// source: only to a candidate at least SwitchRatio times and SwitchMin
	// nearer than the current source. Defaults 2 and 10ms.
	SwitchRatio float64
	SwitchMin   time.Duration
	// MaxDepth: a candidate at this depth or deeper is not chosen (a path
	// that long is a cycle being formed). Default 16.
	MaxDepth int
}

// EnsureDefaults fills zero fields with their defaults and returns p.
func (p *Policy) EnsureDefaults() *Policy {
	if p.TieRTT == 0 {
		p.TieRTT = 2 * time.Millisecond
	}
	if p.TierCost == 0 {
		p.TierCost = 5 * time.Millisecond
	}
	if p.SwitchRatio == 0 {
		p.SwitchRatio = 2
	}
	if p.SwitchMin == 0 {
		p.SwitchMin = 10 * time.Millisecond
	}
	if p.MaxDepth == 0 {
		p.MaxDepth = 16
	}
	return p
}

// Input is everything Choose looks at.
type Input struct {
	// Self is the chooser's id (NodeID of its name).
	Self uint64
	// Current is the name of the source streamed from now; "" if none.
	Current string
	// CurrentStalled: the current source delivers nothing while other
	// members have entries this node lacks.
	CurrentStalled bool
	// Candidates are the live members serving the database, in any order.
	// The chooser itself may be among them; it is skipped.
	Candidates []Candidate
	// Members maps the id of every live member to whether it is a root of
	// the database: a path is usable only if every id on it is live and
	// its last is a root.
	Members map[uint64]bool
	// Avoid names candidates that failed or refused this node recently.
	Avoid map[string]bool
	Policy
}

// Choice is Choose's answer.
type Choice struct {
	// Sources are the usable candidates in order of preference: the
	// source to stream from first, then the secondaries to try next.
	Sources []Candidate
	// Move: the node should (re)connect to Sources[0] now.
	Move bool
	// Reason says why it moves.
	Reason Reason
}

// Choose orders the sources of one database for one node. It is a pure
// function of its input.
//
// Suspect candidates come after all the others: suspicion is this node's
// own probes going unanswered (a lossy path, a busy host), so a suspect
// candidate is still chosen when no other is usable, and a replica whose
// every path drops UDP keeps a source. The current source being suspect
// moves the replica (ReasonSuspect) when a usable candidate is not
// suspect, although its stream may still be alive: a source that does not
// answer probes is likely to stall or break next, and the other side of
// a one-way loss is not the place to wait for that. With every other
// candidate suspect too, the replica stays. No move for RTT goes to a
// suspect candidate. Flapping is kept down by the agent: it counts the
// current source suspect only after two reviews in a row (suspicion
// already takes SuspectAfter missed probes), and has the overlay keep
// probing a source it left for suspicion (Overlay.Watch), so that it
// stays suspect, and last, until it answers.
func Choose(in Input) Choice {
	in.Policy.EnsureDefaults()
	var cur *Candidate
	var usable []Candidate
	for i := range in.Candidates {
		c := &in.Candidates[i]
		if NodeID(c.Name) == in.Self || c.Addr == "" {
			continue
		}
		if c.Name == in.Current {
			cur = c
			continue
		}
		if in.eligible(c) {
			usable = append(usable, *c)
		}
	}
	slices.SortFunc(usable, in.compare)

	if in.Current == "" {
		return Choice{Sources: usable, Move: len(usable) > 0, Reason: ReasonInitial}
	}
	var reason Reason
	switch {
	case cur == nil:
		reason = ReasonDead
	case slices.Contains(cur.Path, in.Self):
		reason = ReasonCycle
	case in.Avoid[cur.Name]:
		reason = ReasonFailed
	case in.CurrentStalled && len(usable) > 0:
		reason = ReasonStalled
	case cur.Suspect && len(usable) > 0 && !usable[0].Suspect:
		reason = ReasonSuspect
	}
	if reason != ReasonNone {
		// The current source goes last: it may come back (or be the only
		// way up after all) but is not retried first.
		out := usable
		if cur != nil && reason != ReasonCycle && len(cur.Path) < in.MaxDepth {
			out = append(out, *cur)
		}
		return Choice{Sources: out, Move: len(usable) > 0, Reason: reason}
	}
	// The current source stays first unless a candidate is much nearer.
	// A source whose own path is broken (its parent died) is kept: it
	// re-attaches by itself, and its children must not cascade. A
	// suspect candidate is not worth a move, however near.
	if len(usable) > 0 && !usable[0].Suspect && in.muchNearer(usable[0], *cur) {
		return Choice{Sources: append(usable, *cur), Move: true, Reason: ReasonSlower}
	}
	return Choice{Sources: append([]Candidate{*cur}, usable...)}
}

// eligible reports whether c may become this node's source.
func (in *Input) eligible(c *Candidate) bool {
	if in.Avoid[c.Name] {
		return false
	}
	if c.MaxChildren > 0 && c.Children >= c.MaxChildren {
		return false
	}
	if c.Root {
		return c.Depth == 0 && len(c.Path) == 0
	}
	if c.Depth < 1 || c.Depth >= in.MaxDepth || len(c.Path) != c.Depth {
		return false
	}
	for _, id := range c.Path {
		if id == in.Self { // c is this node's descendant
			return false
		}
		if _, live := in.Members[id]; !live {
			return false // its path is broken: it is re-attaching
		}
	}
	return in.Members[c.Path[len(c.Path)-1]]
}

// compare orders candidates: not suspect first, then lower cost (RTT
// plus TierCost per tier; costs in the same TieRTT bucket are equal),
// then shallower, then nearer, then by name.
func (in *Input) compare(a, b Candidate) int {
	return cmp.Or(
		cmpBool(a.Suspect, b.Suspect),
		cmp.Compare(in.bucket(in.cost(a)), in.bucket(in.cost(b))),
		cmp.Compare(a.Depth, b.Depth),
		cmp.Compare(unknownLast(a.RTT), unknownLast(b.RTT)),
		cmp.Compare(a.Name, b.Name),
	)
}

// cost is a candidate's RTT plus TierCost per tier; unknown RTT: last.
func (in *Input) cost(c Candidate) time.Duration {
	if c.RTT < 0 {
		return -1
	}
	return c.RTT + time.Duration(c.Depth)*in.TierCost
}

func (in *Input) bucket(rtt time.Duration) int64 {
	return int64(unknownLast(rtt) / in.TieRTT)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func unknownLast(rtt time.Duration) time.Duration {
	if rtt < 0 {
		return time.Duration(1<<63 - 1)
	}
	return rtt
}

// muchNearer reports whether b costs less than cur (RTT plus tiers) by
// the policy's margin.
func (in *Input) muchNearer(b, cur Candidate) bool {
	if b.RTT < 0 || cur.RTT < 0 {
		return false
	}
	cb, cc := in.cost(b), in.cost(cur)
	return float64(cc) > in.SwitchRatio*float64(cb) && cc-cb > in.SwitchMin
}
