package discovery

import (
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

// tree builds the members of a small tree for Choose's tests:
//
//	root
//	├── a (depth 1)
//	│   └── c (depth 2)
//	│       └── self's child "d" (depth 3, hangs below self in some cases)
//	└── b (depth 1)
func cand(name string, rtt time.Duration, parents ...string) Candidate {
	c := Candidate{Name: name, Addr: name + ":7390", RTT: rtt, MaxChildren: 16}
	if len(parents) == 0 {
		c.Root = true
		return c
	}
	for _, p := range parents {
		c.Path = append(c.Path, NodeID(p))
	}
	c.Depth = len(c.Path)
	return c
}

func live(names ...string) map[uint64]bool {
	m := map[uint64]bool{NodeID("root"): true}
	for _, n := range names {
		m[NodeID(n)] = false
	}
	return m
}

func names(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestChoose(t *testing.T) {
	self := NodeID("self")
	full := func(c Candidate) Candidate { c.Children = c.MaxChildren; return c }
	suspect := func(c Candidate) Candidate { c.Suspect = true; return c }
	for _, tc := range []struct {
		name    string
		in      Input
		want    []string
		move    bool
		reason  Reason
		comment string
	}{
		{name: "nothing known", in: Input{Self: self}, want: nil, move: false, reason: ReasonInitial},
		{name: "nearest first",
			in:   Input{Self: self, Members: live("a", "b", "self"), Candidates: []Candidate{cand("root", 80*ms), cand("a", 5*ms, "root"), cand("b", 30*ms, "root")}},
			want: []string{"a", "b", "root"}, move: true, reason: ReasonInitial},
		{name: "shallower on a tie",
			in:   Input{Self: self, Members: live("a", "c"), Candidates: []Candidate{cand("c", 1*ms, "a", "root"), cand("a", 1500*time.Microsecond, "root"), cand("root", 1*ms)}},
			want: []string{"root", "a", "c"}, move: true, reason: ReasonInitial},
		{name: "a deeper candidate must be nearer by its tiers",
			in:   Input{Self: self, Members: live("a", "c"), Candidates: []Candidate{cand("c", 3*ms, "a", "root"), cand("a", 8*ms, "root"), cand("root", 14*ms)}},
			want: []string{"a", "c", "root"}, move: true, reason: ReasonInitial},
		{name: "unknown RTT last",
			in:   Input{Self: self, Members: live("a"), Candidates: []Candidate{cand("root", -1), cand("a", 40*ms, "root")}},
			want: []string{"a", "root"}, move: true, reason: ReasonInitial},
		{name: "full source skipped",
			in:   Input{Self: self, Members: live("a", "b"), Candidates: []Candidate{full(cand("a", 1*ms, "root")), cand("b", 20*ms, "root")}},
			want: []string{"b"}, move: true, reason: ReasonInitial},
		{name: "no limit advertised is room",
			in:   Input{Self: self, Members: live("a"), Candidates: []Candidate{func() Candidate { c := cand("a", 1*ms, "root"); c.MaxChildren, c.Children = 0, 99; return c }()}},
			want: []string{"a"}, move: true, reason: ReasonInitial},
		{name: "own descendant never",
			in:   Input{Self: self, Members: live("a", "self", "d"), Candidates: []Candidate{cand("d", 1*ms, "self", "a", "root"), cand("a", 9*ms, "root")}},
			want: []string{"a"}, move: true, reason: ReasonInitial},
		{name: "self skipped",
			in:   Input{Self: self, Members: live("self"), Candidates: []Candidate{cand("self", 0, "root"), cand("root", 3*ms)}},
			want: []string{"root"}, move: true, reason: ReasonInitial},
		{name: "broken path not chosen (its parent is gone)",
			in:   Input{Self: self, Members: live("c"), Candidates: []Candidate{cand("c", 1*ms, "a", "root"), cand("root", 50*ms)}},
			want: []string{"root"}, move: true, reason: ReasonInitial},
		{name: "path not ending at a root not chosen",
			in:   Input{Self: self, Members: live("a", "x"), Candidates: []Candidate{cand("a", 1*ms, "x"), cand("root", 50*ms)}},
			want: []string{"root"}, move: true, reason: ReasonInitial},
		{name: "replica without a path not chosen",
			in:   Input{Self: self, Members: live("a"), Candidates: []Candidate{{Name: "a", Addr: "a:1", RTT: ms, Depth: 0}, cand("root", 50*ms)}},
			want: []string{"root"}, move: true, reason: ReasonInitial},
		{name: "too deep not chosen",
			in:   Input{Self: self, Members: live("a", "b"), Policy: Policy{MaxDepth: 2}, Candidates: []Candidate{cand("b", 1*ms, "a", "root"), cand("a", 5*ms, "root")}},
			want: []string{"a"}, move: true, reason: ReasonInitial},
		{name: "avoided not chosen",
			in:   Input{Self: self, Members: live("a", "b"), Avoid: map[string]bool{"a": true}, Candidates: []Candidate{cand("a", 1*ms, "root"), cand("b", 5*ms, "root")}},
			want: []string{"b"}, move: true, reason: ReasonInitial},
		{name: "no address not chosen",
			in:   Input{Self: self, Members: live("a"), Candidates: []Candidate{{Name: "root", Root: true}, cand("a", 5*ms, "root")}},
			want: []string{"a"}, move: true, reason: ReasonInitial},
		{name: "suspect nearest last",
			in:   Input{Self: self, Members: live("a", "b"), Candidates: []Candidate{suspect(cand("a", 1*ms, "root")), cand("b", 20*ms, "root"), cand("root", 50*ms)}},
			want: []string{"b", "root", "a"}, move: true, reason: ReasonInitial},
		{name: "all suspect: still chosen, nearest first",
			in:   Input{Self: self, Members: live("a", "b"), Candidates: []Candidate{suspect(cand("b", 20*ms, "root")), suspect(cand("a", 1*ms, "root"))}},
			want: []string{"a", "b"}, move: true, reason: ReasonInitial},

		{name: "keep the current source",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{cand("a", 4*ms, "root"), cand("b", 7*ms, "root")}},
			want: []string{"b", "a"}, move: false, reason: ReasonNone},
		{name: "keep the current source although it is full (this node is one of its children)",
			in:   Input{Self: self, Current: "a", Members: live("a"), Candidates: []Candidate{full(cand("a", 4*ms, "root")), cand("root", 5*ms)}},
			want: []string{"a", "root"}, move: false, reason: ReasonNone},
		{name: "keep a source whose parent died (no cascade)",
			in:   Input{Self: self, Current: "c", Members: live("c", "b"), Candidates: []Candidate{cand("c", 4*ms, "a", "root"), cand("b", 5*ms, "root")}},
			want: []string{"c", "b"}, move: false, reason: ReasonNone},
		{name: "nearer but within the hysteresis ratio",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{cand("a", 30*ms, "root"), cand("b", 50*ms, "root")}},
			want: []string{"b", "a"}, move: false, reason: ReasonNone},
		{name: "nearer by the ratio but under the minimum",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{cand("a", 1*ms, "root"), cand("b", 5*ms, "root")}},
			want: []string{"b", "a"}, move: false, reason: ReasonNone},
		{name: "much nearer: move",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{cand("a", 5*ms, "root"), cand("b", 60*ms, "root")}},
			want: []string{"a", "b"}, move: true, reason: ReasonSlower},
		{name: "much nearer but full: stay",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{full(cand("a", 5*ms, "root")), cand("b", 60*ms, "root")}},
			want: []string{"b"}, move: false, reason: ReasonNone},
		{name: "source without estimate: no RTT move",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{cand("a", 1*ms, "root"), cand("b", -1, "root")}},
			want: []string{"b", "a"}, move: false, reason: ReasonNone},
		{name: "source dead",
			in:   Input{Self: self, Current: "gone", Members: live("a", "b"), Candidates: []Candidate{cand("a", 9*ms, "root"), cand("b", 5*ms, "root")}},
			want: []string{"b", "a"}, move: true, reason: ReasonDead},
		{name: "source dead and nothing else",
			in:   Input{Self: self, Current: "gone", Members: live()},
			want: nil, move: false, reason: ReasonDead},
		{name: "source in a cycle: leave it, never back",
			in:   Input{Self: self, Current: "c", Members: live("c", "self", "b"), Candidates: []Candidate{cand("c", 1*ms, "self", "c", "self"), cand("b", 5*ms, "root")}},
			want: []string{"b"}, move: true, reason: ReasonCycle},
		{name: "source stalled: the others first, it last",
			in:   Input{Self: self, Current: "a", CurrentStalled: true, Members: live("a", "b"), Candidates: []Candidate{cand("a", 1*ms, "root"), cand("b", 5*ms, "root")}},
			want: []string{"b", "a"}, move: true, reason: ReasonStalled},
		{name: "source stalled but the only one: stay",
			in:   Input{Self: self, Current: "a", CurrentStalled: true, Members: live("a"), Candidates: []Candidate{cand("a", 1*ms, "root")}},
			want: []string{"a"}, move: false, reason: ReasonNone},
		{name: "source failing: move",
			in:   Input{Self: self, Current: "a", Avoid: map[string]bool{"a": true}, Members: live("a", "b"), Candidates: []Candidate{cand("a", 1*ms, "root"), cand("b", 5*ms, "root")}},
			want: []string{"b", "a"}, move: true, reason: ReasonFailed},
		{name: "much nearer but suspect: stay",
			in:   Input{Self: self, Current: "b", Members: live("a", "b"), Candidates: []Candidate{suspect(cand("a", 5*ms, "root")), cand("b", 60*ms, "root")}},
			want: []string{"b", "a"}, move: false, reason: ReasonNone},
		{name: "source suspect: move to one that is not",
			in:   Input{Self: self, Current: "a", Members: live("a", "b"), Candidates: []Candidate{suspect(cand("a", 1*ms, "root")), cand("b", 5*ms, "root")}},
			want: []string{"b", "a"}, move: true, reason: ReasonSuspect},
		{name: "source suspect: the suspect others after the one that is not",
			in:   Input{Self: self, Current: "a", Members: live("a", "b", "c"), Candidates: []Candidate{suspect(cand("a", 1*ms, "root")), suspect(cand("b", 2*ms, "root")), cand("c", 40*ms, "root")}},
			want: []string{"c", "b", "a"}, move: true, reason: ReasonSuspect},
		{name: "source suspect, the others too: stay, even for a much nearer one",
			in:   Input{Self: self, Current: "a", Members: live("a", "b"), Candidates: []Candidate{suspect(cand("a", 60*ms, "root")), suspect(cand("b", 5*ms, "root"))}},
			want: []string{"a", "b"}, move: false, reason: ReasonNone},
		{name: "source suspect and the other one full: stay",
			in:   Input{Self: self, Current: "a", Members: live("a", "b"), Candidates: []Candidate{suspect(cand("a", 1*ms, "root")), full(cand("b", 5*ms, "root"))}},
			want: []string{"a"}, move: false, reason: ReasonNone},
		{name: "source suspect and stalled: stalled",
			in:   Input{Self: self, Current: "a", CurrentStalled: true, Members: live("a", "b"), Candidates: []Candidate{suspect(cand("a", 1*ms, "root")), cand("b", 5*ms, "root")}},
			want: []string{"b", "a"}, move: true, reason: ReasonStalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Candidates = slices.Clone(in.Candidates)
			got := Choose(in)
			if g := names(got.Sources); !slices.Equal(g, tc.want) || got.Move != tc.move || got.Reason != tc.reason {
				t.Errorf("Choose = %v move=%v reason=%q, want %v move=%v reason=%q", g, got.Move, got.Reason, tc.want, tc.move, tc.reason)
			}
			// Pure: the same input gives the same answer, whatever the
			// order of the candidates.
			rev := in
			rev.Candidates = slices.Clone(in.Candidates)
			slices.Reverse(rev.Candidates)
			if again := Choose(rev); !slices.Equal(names(again.Sources), names(got.Sources)) || again.Move != got.Move || again.Reason != got.Reason {
				t.Errorf("candidate order changed the answer: %v, then %v", names(got.Sources), names(again.Sources))
			}
		})
	}
}

// TestChooseNeverPicksDescendant checks on random trees that no node ever
// chooses a source whose path contains it, that every chosen source has
// room, and that a suspect source comes only after every other.
func TestChooseNeverPicksDescendant(t *testing.T) {
	for seed := range 200 {
		n := 12
		parent := make([]int, n) // node i's parent; 0 is the root
		for i := 1; i < n; i++ {
			parent[i] = (i*7 + seed) % i
		}
		path := func(i int) []string {
			var p []string
			for j := i; j != 0; {
				j = parent[j]
				p = append(p, name(j))
			}
			return p
		}
		var cands []Candidate
		members := map[uint64]bool{}
		children := make([]int, n)
		for i := 1; i < n; i++ {
			children[parent[i]]++
		}
		for i := range n {
			c := cand(name(i), time.Duration((i*13+seed)%17)*ms, path(i)...)
			c.Children, c.MaxChildren = children[i], 3
			c.Suspect = (i*5+seed)%4 == 0
			cands = append(cands, c)
			members[NodeID(name(i))] = i == 0
		}
		for i := 1; i < n; i++ {
			ch := Choose(Input{Self: NodeID(name(i)), Members: members, Candidates: cands})
			for _, s := range ch.Sources {
				if slices.Contains(s.Path, NodeID(name(i))) || s.Name == name(i) {
					t.Fatalf("seed %d: node %s offered its descendant %s (path %v)", seed, name(i), s.Name, s.Path)
				}
				if s.Children >= s.MaxChildren {
					t.Fatalf("seed %d: node %s offered full %s", seed, name(i), s.Name)
				}
			}
			for k := 1; k < len(ch.Sources); k++ {
				if ch.Sources[k-1].Suspect && !ch.Sources[k].Suspect {
					t.Fatalf("seed %d: node %s offered suspect %s before %s", seed, name(i), ch.Sources[k-1].Name, ch.Sources[k].Name)
				}
			}
		}
	}
}

func name(i int) string {
	if i == 0 {
		return "root"
	}
	return "n" + string(rune('a'+i))
}
