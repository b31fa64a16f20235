package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/ctrim"
	"github.com/quicksilver-kv/qs/internal/keyuse"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/tree"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// listed is a catalog that lists its one database.
type listed struct{ service.Databases }

func (l listed) DatabaseNames() []string { return []string{"db"} }

func TestTreeEndpoint(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	// Without a Tree function: the node alone.
	var doc TreeDoc
	mustDecode(t, e.do("GET", "/v1/db/tree", nil).body, &doc)
	if len(doc.Nodes) != 1 || doc.Nodes[0].Name != "node-a" || doc.Size != 1 {
		t.Fatalf("tree of a lone node: %+v", doc)
	}
	e.db.Tree = func() tree.Node {
		return tree.Node{Name: "node-a", Role: "root", AppliedIndex: 9, Truncated: 2, Children: []tree.Node{
			{Name: "b", Role: "replica", State: "streaming", Source: "a:1", AppliedIndex: 8, LagSeconds: 0.5}}}
	}
	r := e.do("GET", "/v1/db/tree", nil)
	mustDecode(t, r.body, &doc)
	if r.status != 200 || len(doc.Nodes) != 2 || doc.Nodes[1].Parent != "node-a" || doc.Nodes[1].Depth != 1 || doc.Size != 4 || doc.DB != "db" {
		t.Fatalf("tree: %d %+v", r.status, doc)
	}
	mustError(t, e.do("GET", "/v1/db/tree?depth=2", nil), 400, "bad_request")
	mustError(t, e.do("POST", "/v1/db/tree", nil), 405, "method_not_allowed")
	mustError(t, e.do("GET", "/v1/nope/tree", nil), 404, "unknown_database")
}

func TestNodeEndpointAndPage(t *testing.T) {
	st := openStore(t, store.Options{})
	h := statuspage.NewHistory()
	h.Add(statuspage.Point{T: 1000, AppliedIndex: 1})
	h.Add(statuspage.Point{T: 3000, AppliedIndex: 5, LagSeconds: 0.25})
	db := &service.Database{Name: "db", Node: "node-a", Store: st, Refuse: func() error { return nil }, History: h}
	srv := httptest.NewServer(New(Config{}, listed{service.Databases{"db": db}}, nil))
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/v1/node")
	if err != nil {
		t.Fatal(err)
	}
	var doc NodeDoc
	mustDecodeResp(t, resp, &doc)
	if doc.Node != "node-a" || len(doc.Databases) != 1 {
		t.Fatalf("node: %+v", doc)
	}
	if doc.Process.GoHeapBytes == 0 {
		t.Errorf("node: no Go heap in %+v", doc.Process)
	}
	if _, ok := ctrim.ResidentBytes(); ok && doc.Process.ResidentBytes <= 0 {
		t.Errorf("node: no resident memory in %+v", doc.Process)
	}
	if (doc.Process.AllocatorTrims != nil) != ctrim.Trimming() {
		t.Errorf("node: allocator trims %+v in a process where trimming is %v", doc.Process.AllocatorTrims, ctrim.Trimming())
	}
	d := doc.Databases[0]
	if d.Name != "db" || d.Status["role"] != "root" || len(d.History) != 2 || d.History[1].AppliedIndex != 5 || len(d.Tree.Nodes) != 1 || len(d.Tiers) != 1 {
		t.Fatalf("database of node: %+v", d)
	}
	if resp, _ := http.Get(srv.URL + "/v1/node?x=1"); resp.StatusCode != 400 {
		t.Errorf("unknown parameter: %d", resp.StatusCode)
	}

	resp, err = http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("page: %d %v", resp.StatusCode, resp.Header)
	}
	// Only / is the page: other paths are still unknown.
	if resp, _ := http.Get(srv.URL + "/index.html"); resp.StatusCode != 404 {
		t.Errorf("/index.html: %d", resp.StatusCode)
	}
}

func mustDecodeResp(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	mustDecode(t, b, v)
}

type unreadReply struct {
	DB         string  `json:"db"`
	Index      uint64  `json:"index"`
	Since      string  `json:"since"`
	Window     float64 `json:"window_seconds"`
	SampleRate int     `json:"sample_rate"`
	Producers  []struct {
		Name     string `json:"name"`
		Keys     int64  `json:"keys"`
		Unread   int64  `json:"unread"`
		Prefixes []struct {
			Prefix     string   `json:"prefix"`
			Keys       int64    `json:"keys"`
			Unread     int64    `json:"unread"`
			UnreadKeys []string `json:"unread_keys"`
		} `json:"prefixes"`
	} `json:"producers"`
	Unowned *struct {
		Prefix     string   `json:"prefix"`
		Keys       int64    `json:"keys"`
		Unread     int64    `json:"unread"`
		UnreadKeys []string `json:"unread_keys"`
	} `json:"unowned"`
}

func TestUsageUnread(t *testing.T) {
	e := newGateEnv(t, "unread")
	for _, k := range []string{"app/a", "app/b", "app/c", "shared/app/x", "other/z"} {
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{setOp(k, "v")}}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := keyuse.NewSampler(1) // every read sampled: the test is exact
	e.db.Reads = s
	// A replica here: no window. It sends the operator to its root, by
	// address once a source told it.
	if m := mustError(t, e.do("GET", "/v1/db/usage?unread=true", nil), 400, "bad_request").Error.Message; !strings.Contains(m, "ask the root (") {
		t.Errorf("root unknown: %q", m)
	}
	e.setWriteErr(&store.NotRootError{Database: "db", Root: []string{"10.0.0.1:7380"}, Detail: "a replica"})
	if m := mustError(t, e.do("GET", "/v1/db/usage?unread=true", nil), 400, "bad_request").Error.Message; !strings.Contains(m, "ask the root at http://10.0.0.1:7380 (") {
		t.Errorf("root known: %q", m)
	}
	e.setWriteErr(nil)

	w := keyuse.NewWindow(time.Now().Add(-time.Hour))
	e.db.KeyUse = w
	if r := e.do("GET", "/v1/db/keys/app/a", nil); r.status != 200 {
		t.Fatal(r.status)
	}
	e.do("POST", "/v1/db/mget", []byte(`{"keys":["shared/app/x","app/none"]}`))
	reads, _ := s.Drain()
	w.Add(reads, time.Now().Add(-10*time.Minute)) // read ten minutes ago

	var rep unreadReply
	mustDecode(t, e.do("GET", "/v1/db/usage?unread=true&limit=1&producer=unread-app", nil).body, &rep)
	if len(rep.Producers) != 1 || rep.SampleRate != 1 || rep.Window < 3500 {
		t.Fatalf("report: %+v", rep)
	}
	p := rep.Producers[0]
	if p.Keys != 4 || p.Unread != 2 || len(p.Prefixes) != 2 {
		t.Fatalf("producer: %+v", p)
	}
	if a := p.Prefixes[0]; a.Prefix != "app/" || a.Keys != 3 || a.Unread != 2 || len(a.UnreadKeys) != 1 || a.UnreadKeys[0] != "app/b" {
		t.Errorf("prefix app/: %+v", a)
	}
	if x := p.Prefixes[1]; x.Unread != 0 || len(x.UnreadKeys) != 0 {
		t.Errorf("prefix shared/app/: %+v", x)
	}
	// A window that starts after the reads: everything unread.
	mustDecode(t, e.do("GET", "/v1/db/usage?unread=true&window=5m&producer=unread-app", nil).body, &rep)
	if rep.Producers[0].Unread != 4 || rep.Window != 300 {
		t.Errorf("5m window after the reads: %+v", rep)
	}
	// Both producers, the admin's prefix covering every key.
	mustDecode(t, e.do("GET", "/v1/db/usage?unread=true", nil).body, &rep)
	if len(rep.Producers) != 2 || rep.Producers[0].Keys != 5 || rep.Producers[0].Unread != 3 || rep.Unowned == nil || rep.Unowned.Keys != 0 {
		t.Errorf("all producers: %+v", rep)
	}
	// Without producers every key is unowned.
	gate := e.db.Gate
	e.db.Gate = nil
	mustDecode(t, e.do("GET", "/v1/db/usage?unread=true", nil).body, &rep)
	if len(rep.Producers) != 0 || rep.Unowned == nil || rep.Unowned.Keys != 5 || rep.Unowned.Unread != 3 ||
		strings.Join(rep.Unowned.UnreadKeys, " ") != "app/b app/c other/z" {
		t.Errorf("without producers: %+v", rep)
	}
	e.db.Gate = gate
	// One producer: no unowned section.
	rep.Unowned = nil
	mustDecode(t, e.do("GET", "/v1/db/usage?unread=true&producer=unread-app", nil).body, &rep)
	if rep.Unowned != nil {
		t.Errorf("unowned in a producer's report: %+v", rep.Unowned)
	}

	for _, q := range []string{"unread=false", "unread=1", "window=1h", "unread=true&window=0s", "unread=true&window=-1h",
		"unread=true&window=9000h", "unread=true&window=x", "unread=true&limit=-1", "unread=true&limit=10001", "unread=true&limit=x",
		"unread=true&unread=true"} {
		mustError(t, e.do("GET", "/v1/db/usage?"+q, nil), 400, "bad_request")
	}
	mustError(t, e.do("GET", "/v1/db/usage?unread=true&producer=nobody", nil), 404, "not_found")
}

// BenchmarkGetSampled is BenchmarkGet's handler with read sampling off,
// at the default rate, and on every read: the cost sampling adds to a read.
func BenchmarkGetSampled(b *testing.B) {
	st := openStore(b, store.Options{})
	val := make([]byte, 100)
	if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("config/service/key"), Value: val}}}); err != nil {
		b.Fatal(err)
	}
	for _, rate := range []int{0, keyuse.DefaultRate, 1} {
		name := "off"
		db := &service.Database{Name: "db", Store: st}
		if rate > 0 {
			db.Reads, _ = keyuse.NewSampler(rate)
			name = "rate=" + strconv.Itoa(rate)
		}
		h := New(Config{}, service.Databases{"db": db}, nil)
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/v1/db/keys/config/service/key", nil)
			w := &discardWriter{h: make(http.Header, 8)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.status, w.n = 0, 0
				h.ServeHTTP(w, req)
				if w.n != len(val) {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
		})
	}
}
