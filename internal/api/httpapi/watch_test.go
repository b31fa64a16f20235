package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// withHub gives e's database a running watch hub; stop stops it.
func withHub(t testing.TB, e *env, cfg watch.Config) (stop func()) {
	t.Helper()
	h := watch.NewHub(e.st, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		h.Run(ctx)
	}()
	e.db.Watch = h
	stop = func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(60 * time.Second):
			t.Error("hub did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// watchLine is any line of a watch stream.
type watchLine struct {
	Index    uint64   `json:"index"`
	Key      string   `json:"key"`
	Value    []byte   `json:"value"`
	Deleted  bool     `json:"deleted"`
	Progress bool     `json:"progress"`
	Time     string   `json:"time"`
	Error    *errLine `json:"error"`
}

type errLine struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Index   *uint64 `json:"index"`
}

// stream is an open watch.
type stream struct {
	res    *http.Response
	lines  chan watchLine
	cancel context.CancelFunc
	ended  chan struct{}
}

func (e *env) watch(t testing.TB, query string) *stream {
	t.Helper()
	s := e.watchPaused(t, query)
	if s.res.StatusCode == http.StatusOK {
		s.start(t)
	}
	return s
}

// watchPaused opens a watch whose body is not read until start.
func (e *env) watchPaused(t testing.TB, query string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/db/watch"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stream{res: res, lines: make(chan watchLine, 1<<16), cancel: cancel, ended: make(chan struct{})}
	t.Cleanup(s.close)
	return s
}

// start reads the stream's lines into s.lines.
func (s *stream) start(t testing.TB) {
	res := s.res
	if ct := res.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	go func() {
		defer close(s.ended)
		defer close(s.lines)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var l watchLine
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&l); err != nil {
				t.Errorf("bad line %q: %v", sc.Bytes(), err)
				return
			}
			s.lines <- l
		}
	}()
}

func (s *stream) close() {
	s.cancel()
	s.res.Body.Close()
}

// next returns the next line, failing after 5s.
func (s *stream) next(t testing.TB) (watchLine, bool) {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		return l, ok
	case <-time.After(60 * time.Second):
		t.Fatal("no watch line within 60s")
		return watchLine{}, false
	}
}

// changes reads lines until it has n changes, and returns them.
func (s *stream) changes(t testing.TB, n int) []watchLine {
	t.Helper()
	var out []watchLine
	for len(out) < n {
		l, ok := s.next(t)
		if !ok {
			t.Fatalf("stream ended after %d changes", len(out))
		}
		if l.Error != nil {
			t.Fatalf("stream error %+v", *l.Error)
		}
		if !l.Progress {
			out = append(out, l)
		}
	}
	return out
}

func TestWatchHTTPEvents(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	withHub(t, e, watch.Config{})
	s := e.watch(t, "?prefix=app%2F")
	first, _ := s.next(t)
	if !first.Progress || first.Index != e.st.AppliedIndex() {
		t.Fatalf("first line %+v, want progress at %d", first, e.st.AppliedIndex())
	}
	i1 := e.put("app/a", "1").Index
	e.put("other", "x")
	b := mustWriteOK(t, e.do("POST", "/v1/db/batch", []byte(`{"ops":[{"op":"set","key":"app/b","value":"Mg=="},{"op":"del","key":"app/a"}]}`)))
	got := s.changes(t, 3)
	want := []string{
		fmt.Sprintf("%d app/a=1", i1),
		fmt.Sprintf("%d app/b=2", b.Index),
		fmt.Sprintf("%d app/a deleted", b.Index),
	}
	if fmt.Sprint(lineStrings(got)) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", lineStrings(got), want)
	}
	// Resume from the first change: no gap, no duplicate.
	r := e.watch(t, fmt.Sprintf("?prefix=app%%2F&from_index=%d", i1))
	if got := r.changes(t, 2); fmt.Sprint(lineStrings(got)) != fmt.Sprint(want[1:]) {
		t.Fatalf("resumed got %q, want %q", lineStrings(got), want[1:])
	}
}

func lineStrings(ls []watchLine) []string {
	var out []string
	for _, l := range ls {
		if l.Deleted {
			out = append(out, fmt.Sprintf("%d %s deleted", l.Index, l.Key))
		} else {
			out = append(out, fmt.Sprintf("%d %s=%s", l.Index, l.Key, l.Value))
		}
	}
	return out
}

func TestWatchHTTPProgress(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	withHub(t, e, watch.Config{ProgressInterval: 20 * time.Millisecond})
	e.put("x", "1")
	s := e.watch(t, "?prefix=nothing")
	i := e.put("y", "2").Index
	for range 100 {
		l, _ := s.next(t)
		if !l.Progress {
			t.Fatalf("change %+v under another prefix", l)
		}
		if l.Index == i {
			if ts, err := time.Parse(time.RFC3339Nano, l.Time); err != nil || time.Since(ts) > time.Minute {
				t.Fatalf("progress time %q: %v", l.Time, err)
			}
			return
		}
	}
	t.Fatalf("no progress line reached index %d", i)
}

func TestWatchHTTPErrors(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{Retention: store.Retention{MaxEntries: 3, MaxBytes: -1, MaxAge: -1}})
	// No hub: 503.
	mustError(t, e.do("GET", "/v1/db/watch", nil), http.StatusServiceUnavailable, "unavailable")
	withHub(t, e, watch.Config{Budget: watch.NewBudget(watch.Limits{MaxWatchers: 1}, nil)})
	for i := range 10 {
		e.put("k", fmt.Sprint(i))
	}
	mustError(t, e.do("GET", "/v1/db/watch?from_index=1", nil), http.StatusGone, "reread")
	mustError(t, e.do("GET", "/v1/db/watch?frm_index=1", nil), http.StatusBadRequest, "bad_request")
	mustError(t, e.do("GET", "/v1/db/watch?from_index=x", nil), http.StatusBadRequest, "bad_request")
	// Beyond the applied index (10): the node cannot serve it.
	mustError(t, e.do("GET", "/v1/db/watch?from_index=11", nil), http.StatusBadRequest, "bad_request")
	mustError(t, e.do("GET", "/v1/db/watch?from_index=18446744073709551615", nil), http.StatusBadRequest, "bad_request")
	mustError(t, e.do("GET", "/v1/nope/watch", nil), http.StatusNotFound, "unknown_database")
	mustError(t, e.do("POST", "/v1/db/watch", nil), http.StatusMethodNotAllowed, "method_not_allowed")
	s := e.watch(t, "")
	s.next(t)
	mustError(t, e.do("GET", "/v1/db/watch", nil), http.StatusServiceUnavailable, "too_many_watchers")
	s.close()
	// The handler returns when its client goes away, freeing the slot.
	for i := 0; ; i++ {
		r := e.watch(t, "?prefix=none")
		if r.res.StatusCode == http.StatusOK {
			break
		}
		r.close()
		if i == 200 {
			t.Fatalf("watch slot not freed 2s after the client left: %d", r.res.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchHTTPSlowClient: a client that stops reading is cut with a
// too_slow line naming the index to resume from, without slowing a
// reading client; resuming from that index misses nothing.
func TestWatchHTTPSlowClient(t *testing.T) {
	// A write timeout longer than the test: the slow client is cut by its
	// buffer overflowing, never by its socket (60 writes of 512 KiB take
	// over 10 s under the race detector on a busy machine).
	e := newEnv(t, Config{}, store.Options{})
	withHub(t, e, watch.Config{BufferBatches: 2, WriteTimeout: 5 * time.Minute})
	from := e.st.AppliedIndex()
	slow := e.watchPaused(t, "")
	fast := e.watch(t, "")
	val := bytes.Repeat([]byte("v"), 512<<10)
	var last uint64
	fastGot := 0
	for i := range 60 {
		last = mustWriteOK(t, e.do("PUT", keyPath(fmt.Sprint("k", i)), val)).Index
		fastGot += len(fast.changes(t, 1))
	}
	if fastGot != 60 {
		t.Fatalf("fast client got %d changes", fastGot)
	}
	var resume uint64
	n := 0
	slow.start(t)
	for {
		l, ok := slow.next(t)
		if !ok {
			t.Fatal("slow stream ended without an error line")
		}
		if l.Error != nil {
			if l.Error.Code != "too_slow" || l.Error.Index == nil {
				t.Fatalf("error line %+v", *l.Error)
			}
			resume = *l.Error.Index
			break
		}
		if !l.Progress {
			n++
		}
	}
	if resume != from+uint64(n) || n == 60 {
		t.Fatalf("slow client got %d changes, told to resume from %d (started at %d)", n, resume, from)
	}
	r := e.watch(t, fmt.Sprintf("?from_index=%d", resume))
	if got := r.changes(t, 60-n); got[len(got)-1].Index != last || got[0].Index != resume+1 {
		t.Fatalf("resumed client got %d..%d, want %d..%d", got[0].Index, got[len(got)-1].Index, resume+1, last)
	}
}

// TestWatchHTTPShutdown: stopping the hub ends open streams promptly with
// an "unavailable" line.
func TestWatchHTTPShutdown(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	stop := withHub(t, e, watch.Config{ProgressInterval: time.Hour})
	s := e.watch(t, "")
	s.next(t)
	stop()
	l, ok := s.next(t)
	if !ok || l.Error == nil || l.Error.Code != "unavailable" {
		t.Fatalf("line after shutdown %+v (ok %v)", l, ok)
	}
	select {
	case <-s.ended:
	case <-time.After(60 * time.Second):
		t.Fatal("stream still open 60s after shutdown")
	}
}

// TestWatchHTTPMany: 500 concurrent watch streams on a few prefixes, under
// a write budget far below the storm (so that the streams take turns and
// coalesce, and one write carries several shared batches), each receive
// exactly the changes of their prefix, in order, with their values.
func TestWatchHTTPMany(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	withHub(t, e, watch.Config{Budget: watch.NewBudget(watch.Limits{WriteRate: 3000, WriteBurst: 8, WriteConcurrency: 1}, nil), CoalesceBytes: 64, ProgressInterval: 50 * time.Millisecond})
	const n, writes = 500, 40
	prefixes := []string{"k", "k1", "j"}
	streams := make([]*stream, n)
	for i := range streams {
		streams[i] = e.watch(t, "?prefix="+prefixes[i%len(prefixes)])
	}
	for _, s := range streams {
		s.next(t) // where it starts
	}
	want := map[string][]string{}
	for i := range writes {
		k := fmt.Sprint("k", i)
		if i%4 == 0 {
			k = fmt.Sprint("j", i)
		}
		v := fmt.Sprint("value-", i)
		idx := e.put(k, v).Index
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				want[p] = append(want[p], fmt.Sprintf("%d %s=%s", idx, k, v))
			}
		}
	}
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := prefixes[i%len(prefixes)]
			got := lineStrings(s.changes(t, len(want[p])))
			if fmt.Sprint(got) != fmt.Sprint(want[p]) {
				t.Errorf("stream %d (prefix %q) got %q\nwant %q", i, p, got, want[p])
			}
		}()
	}
	wg.Wait()
}

// TestWatchHTTPShutdownMany: stopping the hub ends 300 open streams, idle
// or waiting for a write turn, each with an "unavailable" line naming the
// index to resume from.
func TestWatchHTTPShutdownMany(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	stop := withHub(t, e, watch.Config{Budget: watch.NewBudget(watch.Limits{WriteRate: 50, WriteBurst: 1, WriteConcurrency: 1}, nil), ProgressInterval: 10 * time.Millisecond})
	const n = 300
	streams := make([]*stream, n)
	for i := range streams {
		streams[i] = e.watchPaused(t, "")
		streams[i].start(t)
	}
	time.Sleep(100 * time.Millisecond) // most wait for a turn: 50 writes/s for 300 streams
	stop()
	for i, s := range streams {
		for {
			l, ok := s.next(t)
			if !ok {
				t.Fatalf("stream %d ended without an error line", i)
			}
			if l.Error != nil {
				if l.Error.Code != "unavailable" || l.Error.Index == nil {
					t.Fatalf("stream %d: %+v", i, *l.Error)
				}
				break
			}
		}
		select {
		case <-s.ended:
		case <-time.After(60 * time.Second):
			t.Fatalf("stream %d still open 60s after shutdown", i)
		}
	}
}

// TestWatchStreamBytes: a stream writes a lone batch from its shared
// encoding and builds everything else in its own buffer, so that what it
// writes next never changes the bytes other watchers of the prefix have
// yet to write.
func TestWatchStreamBytes(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	withHub(t, e, watch.Config{})
	h := e.db.Watch
	ctx := context.Background()
	a, err := h.Subscribe([]byte("k"), e.st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := h.Subscribe([]byte("k"), e.st.AppliedIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// next returns s's next update with changes.
	next := func(s *watch.Sub, n int) watch.Update {
		t.Helper()
		for range 100 {
			u, err := s.Next(ctx, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if len(u.Batches) > 0 {
				if len(u.Batches) != n {
					t.Fatalf("%d batches, want %d", len(u.Batches), n)
				}
				return u
			}
		}
		t.Fatal("no changes")
		return watch.Update{}
	}
	e.put("k1", "one")
	u := next(a, 1)
	out, keep := streamBytes(nil, u, nil, 0, e.m)
	want := string(out)
	if &out[0] != &u.Batches[0].Encoded(appendEvents)[0] {
		t.Fatal("a lone batch is not written from its shared encoding")
	}
	// a goes on: a progress line, two batches at once, an error line.
	p, err := a.Next(ctx, 0)
	if err != nil || len(p.Batches) != 0 {
		t.Fatalf("progress %+v, %v", p, err)
	}
	_, keep = streamBytes(keep, p, nil, 0, e.m)
	e.put("k2", "two")
	w3 := e.put("k3", "three")
	// Both in the feed before a's next turn.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
		if pos, _ := h.Position(); pos >= w3.Index {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub did not take k3 within 60s")
		}
	}
	_, keep = streamBytes(keep, next(a, 2), nil, 0, e.m)
	streamBytes(keep, watch.Update{}, watch.ErrSlow, 3, e.m)
	// b writes the first batch only now.
	if got, _ := streamBytes(nil, next(b, 3), nil, 0, e.m); !strings.HasPrefix(string(got), want) {
		t.Fatalf("b writes %q, want it to start with %q", got, want)
	}
	// A buffer grown past the bound is not kept.
	many := watch.Update{Batches: make([]*watch.Batch, watchKeepBufferBytes/len(want)+1)}
	for i := range many.Batches {
		many.Batches[i] = u.Batches[0]
	}
	small := make([]byte, 0, 100)
	out, keep = streamBytes(small, many, nil, 0, e.m)
	if len(out) <= watchKeepBufferBytes || cap(keep) != cap(small) {
		t.Fatalf("wrote %d bytes, kept a buffer of %d", len(out), cap(keep))
	}
}
