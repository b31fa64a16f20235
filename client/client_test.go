package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/store"
)

type catalog map[string]*httpapi.Database

func (c catalog) Database(name string) (*httpapi.Database, bool) { d, ok := c[name]; return d, ok }

func newServer(t testing.TB) *httptest.Server {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), catalog{"default": {Name: "default", Store: st}}, nil))
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

func Example() {
	// A server to talk to (in real use: the address of qs serve).
	dir := tempDir()
	defer os.RemoveAll(dir)
	st, _ := store.Open(store.Options{Dir: dir, MinFreeBytes: 1, BallastBytes: -1})
	defer st.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), catalog{"default": {Name: "default", Store: st}}, nil))
	defer srv.Close()

	c, _ := client.New([]string{srv.URL}, client.Options{Database: "default"})
	ctx := context.Background()
	w, _ := c.Put(ctx, "feature/dark-mode", []byte("on"), nil)
	// Read-your-writes on any server: wait until it has applied the write.
	v, _ := c.Get(ctx, "feature/dark-mode", client.ReadOptions{MinIndex: w.Index})
	fmt.Printf("%s, read at the write's index: %v\n", v.Value, v.Index == w.Index)
	// Output: on, read at the write's index: true
}
