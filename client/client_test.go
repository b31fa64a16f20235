package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

func newServer(t testing.TB) *httptest.Server {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), service.Databases{"default": {Name: "default", Store: st}}, nil))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv
}

func TestClientRoundTrips(t *testing.T) {
	srv := newServer(t)
	c, err := client.New([]string{srv.URL}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"plain", "a/b/c", "with space", "dots.in.name", "100%", "ключ"} {
		w, err := c.Put(ctx, key, []byte("v:"+key), nil)
		if err != nil || !w.Changed {
			t.Fatalf("put %q: %+v %v", key, w, err)
		}
		v, err := c.Get(ctx, key, client.ReadOptions{MinIndex: w.Index})
		if err != nil || string(v.Value) != "v:"+key || v.Index != w.Index || v.AppliedIndex < w.Index {
			t.Fatalf("get %q: %+v %v", key, v, err)
		}
	}
	// Compare-and-swap.
	zero := uint64(0)
	if _, err := c.Put(ctx, "plain", []byte("x"), &zero); err == nil {
		t.Fatal("put with if_index 0 on an existing key succeeded")
	}
	if _, err := c.Get(ctx, "missing", client.ReadOptions{}); !client.IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}
	// Atomic batch with a failing condition changes nothing.
	before, _ := c.Get(ctx, "plain", client.ReadOptions{})
	_, err = c.Batch(ctx, []client.Op{{Key: "plain", Value: []byte("new")}, {Key: "other", Value: []byte("o")}},
		[]client.Cond{{Key: "plain", Index: before.Index + 100}})
	if err == nil {
		t.Fatal("batch with a false condition succeeded")
	}
	if _, err := c.Get(ctx, "other", client.ReadOptions{}); !client.IsNotFound(err) {
		t.Fatalf("failed batch left a write behind: %v", err)
	}
	w, err := c.Batch(ctx, []client.Op{{Key: "p1", Value: []byte("1")}, {Key: "p2", Value: []byte("2")}, {Key: "plain", Delete: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.MGet(ctx, []string{"p1", "p2", "plain"}, client.ReadOptions{MinIndex: w.Index})
	if err != nil || len(m.Values) != 2 || string(m.Values["p2"]) != "2" || m.Index < w.Index {
		t.Fatalf("mget: %+v %v", m, err)
	}
	sc, err := c.Scan(ctx, "p", "", 10, client.ReadOptions{})
	if err != nil || len(sc.Items) != 2 || sc.Items[0].Key != "p1" || sc.Next != nil {
		t.Fatalf("scan: %+v %v", sc, err)
	}
	st, err := c.Status(ctx)
	if err != nil || st["role"] != "root" {
		t.Fatalf("status: %v %v", st, err)
	}
}

func TestClientReadFailover(t *testing.T) {
	srv := newServer(t)
	// The first server refuses connections; reads move on to the second.
	dead := httptest.NewServer(nil)
	deadURL := dead.URL
	dead.Close()
	c, _ := client.New([]string{deadURL, srv.URL}, client.Options{})
	ctx := context.Background()
	direct, _ := client.New([]string{srv.URL}, client.Options{})
	if _, err := direct.Put(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k", client.ReadOptions{}); err != nil || string(v.Value) != "v" {
		t.Fatalf("failover read: %+v %v", v, err)
	}
}

// TestClientSidelinesSilentServer: a server that accepts connections but
// never answers (a host gone behind a socket that is still open) costs one
// timeout, after which reads and writes go to the next server first until
// the sideline ends.
func TestClientSidelinesSilentServer(t *testing.T) {
	srv := newServer(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Accepts connections and never answers; counts them.
	var conns atomic.Int32
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			defer c.Close()
		}
	}()
	const (
		timeout  = time.Second
		sideline = 3 * time.Second
	)
	c, _ := client.New([]string{"http://" + silent.Addr().String(), srv.URL}, client.Options{Timeout: timeout, Sideline: sideline})
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	put := func() error { _, err := c.Put(ctx, "k", []byte("v"), nil); return err }
	get := func() error { _, err := c.Get(ctx, "k", client.ReadOptions{}); return err }
	must(put())
	sidelined := time.Now()
	if n := conns.Load(); n != 1 {
		t.Fatalf("first write: %d connections to the silent server, want 1 (tried first, then timed out)", n)
	}
	for i := 0; i < 5; i++ {
		must(get())
		must(put())
	}
	if n := conns.Load(); n != 1 && time.Since(sidelined) < sideline {
		t.Fatalf("%d connections to the silent server during its sideline, want 1", n)
	} else if n != 1 {
		t.Logf("sideline over before the requests ended (a slow machine): not checked")
	}
	time.Sleep(sideline) // the sideline ends: the first server is tried again
	must(get())
	if n := conns.Load(); n < 2 {
		t.Fatalf("read after the sideline: the silent server was not tried again (%d connections)", n)
	}
}

func Example() {
	// A server to talk to (in real use: the address of qs serve).
	dir := tempDir()
	defer os.RemoveAll(dir)
	st, _ := store.Open(store.Options{Dir: dir, MinFreeBytes: 1, BallastBytes: -1})
	defer st.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), service.Databases{"default": {Name: "default", Store: st}}, nil))
	defer srv.Close()

	c, _ := client.New([]string{srv.URL}, client.Options{Database: "default"})
	ctx := context.Background()
	w, _ := c.Put(ctx, "feature/dark-mode", []byte("on"), nil)
	// Read-your-writes on any server: wait until it has applied the write.
	v, _ := c.Get(ctx, "feature/dark-mode", client.ReadOptions{MinIndex: w.Index})
	fmt.Printf("%s, read at the write's index: %v\n", v.Value, v.Index == w.Index)
	// Output: on, read at the write's index: true
}

// lossy forwards requests but, for the first n writes, throws the answer
// away and reports a broken connection: the server applied the write, the
// client cannot know.
type lossy struct {
	n    int
	seen []string // Idempotency-Key of every write sent
}

func (l *lossy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if r.Method == http.MethodGet || err != nil {
		return resp, err
	}
	l.seen = append(l.seen, r.Header.Get("Idempotency-Key"))
	if l.n > 0 {
		l.n--
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (injected)")
	}
	return resp, nil
}

func TestClientRetriesWritesOnce(t *testing.T) {
	srv := newServer(t)
	tr := &lossy{n: 2}
	c, _ := client.New([]string{srv.URL}, client.Options{HTTPClient: &http.Client{Transport: tr}, RetryBackoff: time.Millisecond})
	ctx := context.Background()
	direct, _ := client.New([]string{srv.URL}, client.Options{})
	before, _ := direct.Put(ctx, "other", []byte("x"), nil)

	w, err := c.Batch(ctx, []client.Op{{Key: "a", Value: []byte("1")}, {Key: "n", Value: []byte("1")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Three attempts, one key; applied by the first, answered by the third.
	if len(tr.seen) != 3 || tr.seen[0] == "" || tr.seen[0] != tr.seen[1] || tr.seen[1] != tr.seen[2] {
		t.Fatalf("attempts carried keys %q", tr.seen)
	}
	if !w.Duplicate || !w.Changed || w.Index != before.Index+1 {
		t.Fatalf("retried write: %+v (previous write at %d)", w, before.Index)
	}
	st, _ := direct.Status(ctx)
	if st["applied_index"].(float64) != float64(before.Index+1) {
		t.Fatalf("the write was applied more than once: applied index %v", st["applied_index"])
	}
	// A new logical write gets a new key.
	tr.n = 1
	w2, err := c.Put(ctx, "a", []byte("2"), nil)
	if err != nil || !w2.Duplicate || w2.Index != w.Index+1 || tr.seen[3] == tr.seen[0] {
		t.Fatalf("second write: %+v %v keys %q", w2, err, tr.seen)
	}
	// Out of attempts: the error says what happened.
	tr.n = 10
	if _, err := c.Put(ctx, "a", []byte("3"), nil); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("write with every answer lost: %v", err)
	}
	// A refusal is final: no retry.
	n := len(tr.seen)
	tr.n = 0
	zero := uint64(0)
	if _, err := c.Put(ctx, "a", []byte("4"), &zero); err == nil || len(tr.seen) != n+1 {
		t.Fatalf("failed condition: %v after %d attempts", err, len(tr.seen)-n)
	}
}

func TestServerAnswersDuplicates(t *testing.T) {
	srv := newServer(t)
	put := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/default/keys/k", strings.NewReader("v"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, body := put("same"); code != 200 || body != `{"index":1,"changed":true}` {
		t.Fatalf("first: %d %s", code, body)
	}
	if code, body := put("same"); code != 200 || body != `{"index":1,"changed":true,"duplicate":true}` {
		t.Fatalf("retry: %d %s", code, body)
	}
	if code, body := put(strings.Repeat("x", 65)); code != 400 || !strings.Contains(body, "bad_request") {
		t.Fatalf("long key: %d %s", code, body)
	}
}

// ExampleClient_Batch writes two keys atomically, only if the first does
// not exist yet. The client retries the batch safely if its answer is
// lost: the server recognises the retry by its Idempotency-Key.
func ExampleClient_Batch() {
	dir := tempDir()
	defer os.RemoveAll(dir)
	st, _ := store.Open(store.Options{Dir: dir, MinFreeBytes: 1, BallastBytes: -1})
	defer st.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), service.Databases{"default": {Name: "default", Store: st}}, nil))
	defer srv.Close()

	c, _ := client.New([]string{srv.URL}, client.Options{})
	ctx := context.Background()
	ops := []client.Op{{Key: "routes/eu", Value: []byte("v2")}, {Key: "routes/us", Value: []byte("v2")}}
	w, err := c.Batch(ctx, ops, []client.Cond{{Key: "routes/eu", Index: 0}})
	fmt.Println(w.Index, w.Changed, err)
	_, err = c.Batch(ctx, ops, []client.Cond{{Key: "routes/eu", Index: 0}})
	fmt.Println(err != nil)
	// Output:
	// 1 true <nil>
	// true
}

func TestClientSendsTokenWithWritesOnly(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.Header.Get("Authorization"))
		if r.Method == http.MethodGet {
			w.Header().Set("Qs-Index", "1")
			w.Header().Set("Qs-Applied-Index", "1")
			w.Write([]byte("v"))
			return
		}
		w.Write([]byte(`{"index":1,"changed":true}`))
	}))
	defer srv.Close()
	c, _ := client.New([]string{srv.URL}, client.Options{Token: "s3cret"})
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k", client.ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "PUT Bearer s3cret" || got[1] != "GET " {
		t.Fatalf("requests %q", got)
	}
}

// TestWriteToReplicaAsksItOnce: a server that answers not_root is not
// asked again in later rounds, and its error is reported once.
func TestWriteToReplicaAsksItOnce(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	db := &service.Database{Name: "default", Store: st, Refuse: func() error {
		return fmt.Errorf("%w: a replica", store.ErrNotRoot)
	}}
	var puts atomic.Int32
	api := httpapi.New(httpapi.DefaultConfig(), service.Databases{"default": db}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			puts.Add(1)
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	c, err := client.New([]string{srv.URL}, client.Options{WriteAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Put(context.Background(), "k", []byte("v"), nil)
	if err == nil {
		t.Fatal("write to a replica succeeded")
	}
	if n := strings.Count(err.Error(), "a replica"); n != 1 || puts.Load() != 1 {
		t.Fatalf("server asked %d times, error repeated %d times: %v", puts.Load(), n, err)
	}
}
