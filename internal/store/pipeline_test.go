package store

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEnv records what the pipeline hands it: "a,b" for a group, "replace
// r" for a snapshot install. While held, a commit waits for release.
type fakeEnv struct {
	mu      sync.Mutex
	calls   []string
	held    bool
	release chan struct{}
	entered chan string
}

func newFakeEnv() *fakeEnv {
	return &fakeEnv{release: make(chan struct{}), entered: make(chan string, 16)}
}

func (f *fakeEnv) commit(group []*request) {
	var names []string
	for _, r := range group {
		names = append(names, string(r.batch.ID))
	}
	call := strings.Join(names, ",")
	f.mu.Lock()
	f.calls = append(f.calls, call)
	held := f.held
	f.held = false // only the first commit after hold
	f.mu.Unlock()
	f.entered <- call
	if held {
		<-f.release
	}
	for _, r := range group {
		close(r.done)
	}
}

func (f *fakeEnv) replace(r *request) {
	f.mu.Lock()
	f.calls = append(f.calls, "replace "+string(r.batch.ID))
	f.mu.Unlock()
	close(r.done)
}

func (f *fakeEnv) lingered(time.Duration) {}

func (f *fakeEnv) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// startPipeline runs a pipeline over env until the test ends.
func startPipeline(t *testing.T, env commitEnv, maxGroupBytes int) (chan<- *request, chan struct{}) {
	t.Helper()
	reqs := make(chan *request, 64)
	quit := make(chan struct{})
	done := make(chan struct{})
	p := &pipeline{reqs: reqs, quit: quit, env: env, maxGroupBytes: maxGroupBytes}
	go func() {
		defer close(done)
		p.run()
	}()
	t.Cleanup(func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-done
	})
	return reqs, quit
}

func req(name string, kind requestKind, size int) *request {
	return &request{kind: kind, batch: Batch{ID: []byte(name)}, size: size, done: make(chan struct{})}
}

func waitDone(t *testing.T, rs ...*request) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for _, r := range rs {
		select {
		case <-r.done:
		case <-deadline:
			t.Fatalf("request %s never answered", r.batch.ID)
		}
	}
}

func waitEntered(t *testing.T, f *fakeEnv, want string) {
	t.Helper()
	select {
	case got := <-f.entered:
		if got != want {
			t.Fatalf("commit of %q started, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("commit of %q never started", want)
	}
}

// A lone request is committed at once, alone; requests that arrive during
// a commit form the next group, in their order; a snapshot install and a
// segment compaction run alone, after the group gathered with them.
func TestPipelineGroups(t *testing.T) {
	t.Parallel()
	env := newFakeEnv()
	reqs, _ := startPipeline(t, env, 1<<20)
	a := req("a", reqWrite, 1)
	reqs <- a
	waitDone(t, a)
	waitEntered(t, env, "a")

	env.mu.Lock()
	env.held = true
	env.mu.Unlock()
	b := req("b", reqWrite, 1)
	reqs <- b
	waitEntered(t, env, "b")
	queued := []*request{req("c", reqWrite, 1), req("r", reqReplace, 0), req("d", reqApply, 1), req("k", reqCompact, 0), req("e", reqHeartbeat, 0)}
	for _, r := range queued {
		reqs <- r
	}
	close(env.release)
	waitDone(t, b)
	waitDone(t, queued...)
	want := []string{"a", "b", "c,d,e", "k", "replace r"}
	if got := env.got(); !slices.Equal(got, want) {
		t.Fatalf("commits %q, want %q", got, want)
	}
}

// A group stops growing once it holds MaxGroupBytes; the rest form the
// next one.
func TestPipelineGroupBytes(t *testing.T) {
	t.Parallel()
	env := newFakeEnv()
	env.held = true
	reqs, _ := startPipeline(t, env, 10)
	a := req("a", reqWrite, 6)
	reqs <- a
	waitEntered(t, env, "a")
	queued := []*request{req("b", reqWrite, 6), req("c", reqWrite, 6), req("d", reqWrite, 6)}
	for _, r := range queued {
		reqs <- r
	}
	close(env.release)
	waitDone(t, a)
	waitDone(t, queued...)
	want := []string{"a", "b,c", "d"}
	if got := env.got(); !slices.Equal(got, want) {
		t.Fatalf("commits %q, want %q", got, want)
	}
}

// When the store closes, every request still queued is answered, either
// committed or failed with ErrClosed, and the pipeline returns.
func TestPipelineClose(t *testing.T) {
	t.Parallel()
	env := newFakeEnv()
	env.held = true
	reqs, quit := startPipeline(t, env, 1<<20)
	a := req("a", reqWrite, 1)
	reqs <- a
	waitEntered(t, env, "a")
	queued := []*request{req("b", reqWrite, 1), req("c", reqWrite, 1)}
	for _, r := range queued {
		reqs <- r
	}
	close(quit)
	close(env.release)
	waitDone(t, a)
	waitDone(t, queued...)
	committed := strings.Join(env.got(), ",")
	for _, r := range queued {
		if r.err != nil && !errors.Is(r.err, ErrClosed) {
			t.Fatalf("request %s: %v", r.batch.ID, r.err)
		}
		if (r.err == nil) != strings.Contains(committed, string(r.batch.ID)) {
			t.Fatalf("request %s: error %v, commits %q", r.batch.ID, r.err, committed)
		}
	}
}

// A store whose committer cannot be opened fails every request with
// ErrWriteFailed, a snapshot install included, and each request tries to
// open it again: a transient read error while it was opened (at Open,
// or after an install) left the store refusing every write until a
// restart (TestMetamorphicFaults, seed 5122473270499533048).
func TestStoreEnvWithoutCommitter(t *testing.T) {
	t.Parallel()
	var opens atomic.Int32
	env := &storeEnv{s: &Store{opts: Options{Name: "t", Logger: quietLogger()}}, openErr: errors.New("meta record unreadable"),
		newCommitter: func(*Store) (*committer, error) {
			opens.Add(1)
			return nil, errors.New("meta record unreadable")
		}}
	reqs, _ := startPipeline(t, env, 1<<20)
	rs := []*request{req("a", reqWrite, 1), req("r", reqReplace, 0), req("b", reqWrite, 1)}
	for i, r := range rs {
		reqs <- r
		waitDone(t, r)
		if !errors.Is(r.err, ErrWriteFailed) || !strings.Contains(r.err.Error(), "meta record unreadable") {
			t.Fatalf("request %s: %v", r.batch.ID, r.err)
		}
		if got := opens.Load(); got != int32(i+1) {
			t.Fatalf("after %d requests the committer was opened %d times: want one attempt per request", i+1, got)
		}
	}
}
