package tree

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultTTL is how long a child stays in the tree after its last report:
// long enough for a few missed reports (they come every second), short
// enough that a node gone shows as gone within seconds.
const DefaultTTL = 10 * time.Second

// Registry holds the latest report of each child, per database. It is
// safe for concurrent use.
type Registry struct {
	ttl time.Duration
	mu  struct {
		sync.Mutex
		dbs map[string]map[string]child // db → child id → its last report
	}
}

type child struct {
	node Node
	at   time.Time
}

// NewRegistry returns a registry that forgets a child ttl after its last
// report (DefaultTTL if ttl ≤ 0).
func NewRegistry(ttl time.Duration) *Registry {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	r := &Registry{ttl: ttl}
	r.mu.dbs = map[string]map[string]child{}
	return r
}

// Put keeps n as the subtree of child id in database db, replacing the
// child's previous report.
func (r *Registry) Put(db, id string, n Node, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mu.dbs[db]
	if m == nil {
		m = map[string]child{}
		r.mu.dbs[db] = m
	}
	m[id] = child{node: n, at: now}
}

// Children returns the subtrees of db's children that reported within the
// TTL, sorted by name, and forgets the others.
func (r *Registry) Children(db string, now time.Time) []Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mu.dbs[db]
	var out []Node
	for id, c := range m {
		if now.Sub(c.at) > r.ttl {
			delete(m, id)
			continue
		}
		out = append(out, c.node)
	}
	slices.SortFunc(out, func(a, b Node) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Source, b.Source)
	})
	return out
}

// Compose returns self with the children's subtrees under it, cut to the
// report bounds.
func (r *Registry) Compose(db string, self Node, now time.Time) Node {
	self.Children = r.Children(db, now)
	return Cut(self, MaxNodes, MaxDepth)
}
