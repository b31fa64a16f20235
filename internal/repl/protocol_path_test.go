package repl

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

func TestDecodePathRejectsBadInput(t *testing.T) {
	tooMany := (&Path{Nodes: make([]uint64, MaxPathNodes+1)}).AppendPayload(nil)
	for name, p := range map[string][]byte{
		"empty":          nil,
		"bad count":      {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"too many":       tooMany,
		"truncated":      {2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
		"trailing bytes": append((&Path{Nodes: []uint64{7}}).AppendPayload(nil), 0),
	} {
		t.Run(name, func(t *testing.T) {
			if m, err := DecodePayload(MsgPath, p); !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodePayload = %+v, %v; want ErrMalformed", m, err)
			}
		})
	}
}

func TestExtendPath(t *testing.T) {
	if got := ExtendPath(3, []uint64{2, 1}); !slices.Equal(got, []uint64{3, 2, 1}) {
		t.Errorf("ExtendPath(3, [2 1]) = %v", got)
	}
	if got := ExtendPath(3, nil); !slices.Equal(got, []uint64{3}) {
		t.Errorf("ExtendPath(3, nil) = %v, want [3]: between sources", got)
	}
	// A cycle: the source's path holds this node. Only the node itself
	// goes on, so the path does not grow around the cycle.
	if got := ExtendPath(3, []uint64{2, 3, 2, 3}); !slices.Equal(got, []uint64{3}) {
		t.Errorf("ExtendPath in a cycle = %v, want [3]", got)
	}
	long := make([]uint64, MaxPathNodes)
	for i := range long {
		long[i] = uint64(100 + i)
	}
	got := ExtendPath(1, long)
	if len(got) != MaxPathNodes || got[0] != 1 || got[1] != 100 {
		t.Errorf("ExtendPath of a full path: %d nodes from %v, want %d from [1 100 …]", len(got), got[:2], MaxPathNodes)
	}
}

// movablePath is a PathSource a test changes.
type movablePath struct {
	mu      sync.Mutex
	nodes   []uint64
	changed chan struct{}
}

func newMovablePath(nodes ...uint64) *movablePath {
	return &movablePath{nodes: nodes, changed: make(chan struct{})}
}

func (p *movablePath) Path() ([]uint64, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes, p.changed
}

func (p *movablePath) set(nodes ...uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nodes = nodes
	close(p.changed)
	p.changed = make(chan struct{})
}

// TestPathDownTheTree: a chain root → A → B. Each node's path travels to
// its children with the log, each replica passing on its own id and its
// source's path; a change reaches the leaf at once, not at the next idle
// Progress (an hour away here), also while entries flow; a replica that
// stopped replicating knows no path and sends only itself.
func TestPathDownTheTree(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	rootPath := newMovablePath(1)
	slow := func(c *ServerConfig) { c.ProgressInterval = time.Hour }
	prev := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		slow(c)
		c.Path = func(string) PathSource { return rootPath }
	})
	var replicas []*Replica
	var stops []func()
	for i := range 2 {
		st := openStore(t, "", name, root.DBID(), store.Retention{})
		pid := NewProcessID()
		r, stop := startReplica(t, st, pid, []string{prev}, func(c *ReplicaConfig) { c.IdleTimeout = 2 * time.Hour })
		self := uint64(10 + i)
		prev = startServer(t, st, pid, func(c *ServerConfig) {
			slow(c)
			c.Path = func(string) PathSource { return ReplicaPath(self, r) }
		})
		replicas, stops = append(replicas, r), append(stops, stop)
	}
	a, b := replicas[0], replicas[1]
	pathOf := func(r *Replica) []uint64 { p, _ := r.SourcePath(); return p }
	waitFor(t, "the leaf to learn its source's path", 30*time.Second, func() bool {
		return slices.Equal(pathOf(b), []uint64{10, 1})
	})
	if p := pathOf(a); !slices.Equal(p, []uint64{1}) {
		t.Fatalf("A's source path %v, want [1]", p)
	}
	if p := b.State().SourcePath; !slices.Equal(p, []uint64{10, 1}) {
		t.Fatalf("B's state has source path %v, want [10 1]", p)
	}

	// The root "moves" (as a replica would), while the streams are idle,
	// then while entries flow.
	rootPath.set(1, 2)
	waitFor(t, "the leaf to learn the changed path", 30*time.Second, func() bool {
		return slices.Equal(pathOf(b), []uint64{10, 1, 2})
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		writeN(t, root, "busy", 200)
	}()
	rootPath.set(1, 2, 3)
	waitFor(t, "the leaf to learn the path changed under writes", 30*time.Second, func() bool {
		return slices.Equal(pathOf(b), []uint64{10, 1, 2, 3})
	})
	<-done

	// A stops replicating: it knows no path from a source, and tells B
	// that its own chain is only itself.
	_, changed := a.SourcePath()
	stops[0]()
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("A's path did not change when it stopped replicating")
	}
	if p := pathOf(a); p != nil {
		t.Fatalf("A's source path %v after it stopped replicating, want none", p)
	}
	waitFor(t, "the leaf to learn that A is between sources", 30*time.Second, func() bool {
		return slices.Equal(pathOf(b), []uint64{10})
	})
}

// TestOlderSourceSendsNoPath: a source of QuietVersion refuses the Hello
// of PathVersion; the replica speaks RootVersion to it and knows no path.
func TestOlderSourceSendsNoPath(t *testing.T) {
	r, got := streamFromOlderSource(t, QuietVersion)
	if !slices.Equal(got, []uint16{PathVersion, RootVersion}) {
		t.Fatalf("hello versions %v, want [%d %d]", got, PathVersion, RootVersion)
	}
	if p, _ := r.SourcePath(); p != nil {
		t.Fatalf("source path %v from a source that sends none", p)
	}
}
