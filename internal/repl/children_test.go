package repl

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// startCountingServer is startServer that returns the server too.
func startCountingServer(t *testing.T, st *store.Store, maxChildren int) (*Server, string) {
	t.Helper()
	srv, err := NewServer(ServerConfig{Metrics: metricsOf(t), ProcessID: NewProcessID(), ProgressInterval: 50 * time.Millisecond, MaxChildren: maxChildren},
		func(db string) (*store.Store, bool) { return st, db == st.Name() }, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, ln.Addr().String()
}

// fakeFinder hands out a settable source list and records failures.
type fakeFinder struct {
	mu      sync.Mutex
	sources []string
	failed  []string
}

func (f *fakeFinder) Sources() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sources)
}

func (f *fakeFinder) Failed(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, addr)
}

func (f *fakeFinder) set(s ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sources = s
}

func (f *fakeFinder) failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.failed)
}

// TestMaxChildren: a server streams a database to at most MaxChildren
// replicas; one more is refused "full" (counted), while connections that
// are not children (newest-only watchers) are still served. A slot frees
// when its replica goes.
func TestMaxChildren(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	write(t, root, "k", "v")
	srv, addr := startCountingServer(t, root, 1)

	a := openStore(t, "", name, root.DBID(), store.Retention{})
	_, stopA := startReplica(t, a, NewProcessID(), []string{addr}, nil)
	waitCaughtUp(t, a, root)
	if n := srv.Children(name); n != 1 {
		t.Fatalf("Children = %d, want 1", n)
	}

	before := value(metricsOf(t).refusals.WithLabelValues("full"))
	_, m := rawSession(t, addr, &Hello{Version: streamVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID()})
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseFull {
		t.Fatalf("second child answered %v, want refuse full", m)
	}
	if got := value(metricsOf(t).refusals.WithLabelValues("full")) - before; got != 1 {
		t.Fatalf("refusals_total{code=full} grew by %v, want 1", got)
	}
	_, m = rawSession(t, addr, &Hello{Version: streamVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID(), NewestOnly: true})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("a newest-only watcher of a full server got %v, want welcome", m)
	}

	stopA()
	waitFor(t, "the child slot to free", 30*time.Second, func() bool { return srv.Children(name) == 0 })
	_, m = rawSession(t, addr, &Hello{Version: streamVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID(), LastIndex: root.AppliedIndex()})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("after the child left: %v, want welcome", m)
	}
}

// TestFinderSources: a replica whose sources come from a SourceFinder
// tells it of a source that refused "full" and streams from the next one;
// Reconnect moves it to the finder's new first source at once, without a
// bootstrap and without counting an error.
func TestFinderSources(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	write(t, root, "k", "v")
	_, full := startCountingServer(t, root, 1)
	_, other := startCountingServer(t, root, 0)
	occupant := openStore(t, "", name, root.DBID(), store.Retention{})
	startReplica(t, occupant, NewProcessID(), []string{full}, nil)
	waitCaughtUp(t, occupant, root)

	f := &fakeFinder{}
	st := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, st, NewProcessID(), nil, func(c *ReplicaConfig) { c.Finder = f })
	waitFor(t, "the replica to wait for sources", 30*time.Second, func() bool { return r.State().LastError == errNoSource })
	f.set(full, other)
	waitFor(t, "the replica to stream from the second source", 30*time.Second, func() bool {
		s := r.State()
		return s.Source == other && s.Status == StatusStreaming
	})
	if got := f.failures(); !slices.Contains(got, full) {
		t.Fatalf("finder told of failures %v, want %s (full)", got, full)
	}
	waitCaughtUp(t, st, root)

	_, thirdAddr := startCountingServer(t, root, 0)
	errsBefore := errCount(t, name, kindIO) + errCount(t, name, kindRefused)
	f.set(thirdAddr, other)
	r.Reconnect()
	waitFor(t, "the replica to move to the new first source", 30*time.Second, func() bool {
		s := r.State()
		return s.Source == thirdAddr && s.Status == StatusStreaming
	})
	write(t, root, "k2", "v2")
	waitCaughtUp(t, st, root)
	if s := r.State(); s.Bootstraps != 0 {
		t.Fatalf("bootstraps = %d, want 0", s.Bootstraps)
	}
	if got := errCount(t, name, kindIO) + errCount(t, name, kindRefused) - errsBefore; got != 0 {
		t.Fatalf("a reconnect counted %v errors", got)
	}
}

// TestAcceptChildRefusesDetached: a server whose AcceptChild says no
// refuses a replica's log stream "detached", and takes no child slot.
func TestAcceptChildRefusesDetached(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	srv, err := NewServer(ServerConfig{Metrics: metricsOf(t), ProcessID: NewProcessID(), AcceptChild: func(db string, client ProcessID) *RefusedError {
		return &RefusedError{Code: RefuseDetached, Reason: "between sources"}
	}}, func(db string) (*store.Store, bool) { return root, db == root.Name() }, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	before := value(metricsOf(t).refusals.WithLabelValues("detached"))
	_, m := rawSession(t, ln.Addr().String(), &Hello{Version: streamVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID()})
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseDetached {
		t.Fatalf("answered %v, want refuse detached", m)
	}
	if got := value(metricsOf(t).refusals.WithLabelValues("detached")) - before; got != 1 {
		t.Fatalf("refusals_total{code=detached} grew by %v", got)
	}
	if n := srv.Children(name); n != 0 {
		t.Fatalf("a refused replica holds a child slot: %d", n)
	}
	// Watchers are no children: still served.
	_, m = rawSession(t, ln.Addr().String(), &Hello{Version: streamVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID(), NewestOnly: true})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("watcher answered %v", m)
	}
}
