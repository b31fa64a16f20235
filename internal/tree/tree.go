package tree

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Bounds of a report. A report over any of them is refused whole.
const (
	// ReportVersion is the version of the report document this package
	// writes. A reader accepts any version ≥ 1 and ignores fields it does
	// not know, so a newer child can report to an older parent.
	ReportVersion = 1
	// MaxNodes is the most nodes a subtree holds (the reporting node
	// included). A node cuts what it reports to this many, nearest first.
	MaxNodes = 1000
	// MaxDepth is the most levels below a reporting node.
	MaxDepth = 32
	// MaxName bounds a node's name and its source address, in bytes.
	MaxName = 255
	// MaxWord bounds a role or a state, in bytes.
	MaxWord = 32
	// MaxReads is the most sampled keys one report carries.
	MaxReads = 16384
	// MaxLagSeconds bounds a node's lag, either way (a lag below 0 is
	// unknown, LagUnknown): a hundred years.
	MaxLagSeconds = 100 * 365 * 24 * 3600
)

// LagUnknown reports whether a lag of lagSeconds is unknown: below 0, the
// last entry is dated in the node's future, so how far behind the node
// is cannot be told (its clock or the root's is wrong).
func LagUnknown(lagSeconds float64) bool { return lagSeconds < 0 }

// ErrInvalid is wrapped by every error of Decode and Validate.
var ErrInvalid = errors.New("qs: invalid tree report")

// Node is one node of the replication tree for one database, with the
// nodes that replicate from it.
type Node struct {
	// Name is the node's name (--node-name; the host name by default).
	Name string `json:"name"`
	// Role is root, replica or proxy.
	Role string `json:"role"`
	// State is what a replica is doing (streaming, catching_up, ...);
	// empty for a root.
	State string `json:"state,omitempty"`
	// Source is the address a replica streams from; empty for a root.
	Source       string `json:"source,omitempty"`
	AppliedIndex uint64 `json:"applied_index"`
	// LagSeconds is the node's lag (its status's lag_seconds). Below 0,
	// the lag is unknown: the node's last entry is dated that far in its
	// future (its clock or the root's is wrong). It is reported as it
	// is, never as 0.
	LagSeconds float64 `json:"lag_seconds"`
	Children   []Node  `json:"children,omitempty"`
	// Truncated counts the nodes below this one left out to bound the
	// report.
	Truncated int `json:"truncated,omitempty"`
}

// Sample is a sampled read count of one key, by the key's hash
// (keyuse.Hash). It travels as a JSON pair [hash, count].
type Sample struct {
	Hash  uint64
	Count uint64
}

func (s Sample) MarshalJSON() ([]byte, error) { return json.Marshal([2]uint64{s.Hash, s.Count}) }

func (s *Sample) UnmarshalJSON(b []byte) error {
	var p []uint64
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if len(p) != 2 {
		return fmt.Errorf("a read sample is [hash, count], not %d numbers", len(p))
	}
	s.Hash, s.Count = p[0], p[1]
	return nil
}

// Report is what a replica sends its source: its subtree, and the reads
// it and its subtree sampled since its previous report.
type Report struct {
	Version int  `json:"v"`
	Node    Node `json:"node"`
	// Reads are sampled read counts, by key hash, added since the
	// previous report (a delta: the receiver adds them up).
	Reads []Sample `json:"reads,omitempty"`
	// Sampled is how many reads the samples stand for in total (a
	// count of samples, not of reads: each sample is one read in N).
	Sampled uint64 `json:"sampled,omitempty"`
}

// Encode returns the document of r, with Version set.
func Encode(r Report) ([]byte, error) {
	r.Version = ReportVersion
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// Decode parses and validates a report document.
func Decode(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := r.Validate(); err != nil {
		return Report{}, err
	}
	return r, nil
}

// Validate checks every bound of r.
func (r *Report) Validate() error {
	if r.Version < 1 {
		return fmt.Errorf("%w: version %d", ErrInvalid, r.Version)
	}
	if len(r.Reads) > MaxReads {
		return fmt.Errorf("%w: %d sampled keys over %d", ErrInvalid, len(r.Reads), MaxReads)
	}
	n := 0
	return validateNode(&r.Node, 0, &n)
}

func validateNode(nd *Node, depth int, count *int) error {
	*count++
	switch {
	case *count > MaxNodes:
		return fmt.Errorf("%w: more than %d nodes", ErrInvalid, MaxNodes)
	case depth > MaxDepth:
		return fmt.Errorf("%w: deeper than %d levels", ErrInvalid, MaxDepth)
	case nd.Name == "" || len(nd.Name) > MaxName || !utf8.ValidString(nd.Name):
		return fmt.Errorf("%w: node name %q: 1 to %d bytes of UTF-8", ErrInvalid, clip(nd.Name), MaxName)
	case len(nd.Source) > MaxName || !utf8.ValidString(nd.Source):
		return fmt.Errorf("%w: source of node %q over %d bytes or not UTF-8", ErrInvalid, nd.Name, MaxName)
	case nd.Role == "" || len(nd.Role) > MaxWord || len(nd.State) > MaxWord || !utf8.ValidString(nd.Role) || !utf8.ValidString(nd.State):
		return fmt.Errorf("%w: role %q or state %q of node %q", ErrInvalid, clip(nd.Role), clip(nd.State), nd.Name)
	case nd.LagSeconds != nd.LagSeconds || nd.LagSeconds > MaxLagSeconds || nd.LagSeconds < -MaxLagSeconds:
		return fmt.Errorf("%w: lag %v of node %q", ErrInvalid, nd.LagSeconds, nd.Name)
	case nd.Truncated < 0 || nd.Truncated > 1<<30:
		return fmt.Errorf("%w: truncated %d of node %q", ErrInvalid, nd.Truncated, nd.Name)
	}
	for i := range nd.Children {
		if err := validateNode(&nd.Children[i], depth+1, count); err != nil {
			return err
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Size is the number of nodes in n's subtree, n and the nodes left out
// (Truncated) included.
func Size(n *Node) int {
	s := 1 + n.Truncated
	for i := range n.Children {
		s += Size(&n.Children[i])
	}
	return s
}

// Cut returns n with at most maxNodes nodes and maxDepth levels below it,
// keeping the nearest nodes (breadth first, in child order); each node
// whose children were left out counts them, with their subtrees, in
// Truncated. n itself is not changed.
func Cut(n Node, maxNodes, maxDepth int) Node {
	maxNodes = max(maxNodes, 1)
	// Breadth-first: which nodes fit.
	type item struct {
		n     *Node
		depth int
	}
	keep := map[*Node]bool{&n: true}
	queue := []item{{&n, 0}}
	kept := 1
	for i := 0; i < len(queue); i++ {
		it := queue[i]
		if it.depth >= maxDepth {
			continue
		}
		for c := range it.n.Children {
			if kept >= maxNodes {
				break
			}
			ch := &it.n.Children[c]
			keep[ch] = true
			kept++
			queue = append(queue, item{ch, it.depth + 1})
		}
	}
	return rebuild(&n, keep)
}

func rebuild(n *Node, keep map[*Node]bool) Node {
	out := *n
	out.Children = nil
	for i := range n.Children {
		c := &n.Children[i]
		if keep[c] {
			out.Children = append(out.Children, rebuild(c, keep))
		} else {
			out.Truncated += Size(c)
		}
	}
	return out
}

// Row is one node of a flattened tree: the JSON of GET /v1/{db}/tree.
type Row struct {
	Name         string  `json:"name"`
	Role         string  `json:"role"`
	State        string  `json:"state,omitempty"`
	Source       string  `json:"source,omitempty"`
	Depth        int     `json:"depth"`
	Parent       string  `json:"parent,omitempty"`
	AppliedIndex uint64  `json:"applied_index"`
	LagSeconds   float64 `json:"lag_seconds"`
	// LagUnknown: LagSeconds is below 0 (LagUnknown).
	LagUnknown bool `json:"lag_unknown,omitempty"`
	// Truncated counts nodes below this one that reports left out.
	Truncated int `json:"truncated,omitempty"`
}

// Flatten lists n's subtree in depth-first order, n first at depth 0,
// each node before the nodes that replicate from it.
func Flatten(n Node) []Row {
	var rows []Row
	var walk func(n *Node, depth int, parent string)
	walk = func(n *Node, depth int, parent string) {
		rows = append(rows, Row{Name: n.Name, Role: n.Role, State: n.State, Source: n.Source, Depth: depth, Parent: parent,
			AppliedIndex: n.AppliedIndex, LagSeconds: n.LagSeconds, LagUnknown: LagUnknown(n.LagSeconds), Truncated: n.Truncated})
		for i := range n.Children {
			walk(&n.Children[i], depth+1, n.Name)
		}
	}
	walk(&n, 0, "")
	return rows
}
