package httpapi

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// fill writes n keys prefix%05d = v%d in batches of 500.
func fill(t *testing.T, s *store.Store, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; {
		var ops []wal.Op
		for ; i < n && len(ops) < 500; i++ {
			ops = append(ops, wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "%s%05d", prefix, i), Value: fmt.Appendf(nil, "v%d", i)})
		}
		if _, err := s.Write(context.Background(), store.Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) scan(query string) scanReply {
	e.t.Helper()
	r := e.do("GET", "/v1/db/keys?"+query, nil)
	if r.status != 200 {
		e.t.Fatalf("scan %s: %d %s", query, r.status, r.body)
	}
	var s scanReply
	mustDecode(e.t, r.body, &s)
	if r.header.Get("Qs-Applied-Index") != strconv.FormatUint(s.Index, 10) {
		e.t.Fatalf("scan Qs-Applied-Index %q, body index %d", r.header.Get("Qs-Applied-Index"), s.Index)
	}
	return s
}

func TestScanPagination(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	const n = 2500
	fill(t, e.st, "o/", 10) // before the prefix
	fill(t, e.st, "p/", n)
	fill(t, e.st, "q/", 10) // after it
	var got []scanItem
	var pages []int
	start := ""
	for {
		q := url.Values{"prefix": {"p/"}, "limit": {"1000"}}
		if start != "" {
			q.Set("start", start)
		}
		s := e.scan(q.Encode())
		if s.Index != e.st.AppliedIndex() {
			t.Fatalf("page index %d, applied %d", s.Index, e.st.AppliedIndex())
		}
		pages = append(pages, len(s.Items))
		got = append(got, s.Items...)
		if s.Next == nil {
			break
		}
		start = *s.Next
		if len(pages) > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if fmt.Sprint(pages) != "[1000 1000 500]" {
		t.Fatalf("pages %v, want [1000 1000 500]", pages)
	}
	for i, it := range got {
		if want := fmt.Sprintf("p/%05d", i); it.Key != want || string(it.Value) != fmt.Sprintf("v%d", i) || it.Index == 0 {
			t.Fatalf("item %d: %+v, want key %s", i, it, want)
		}
	}
	// Without limit: DefaultScanLimit. Without prefix: every key.
	if s := e.scan("prefix=p/"); len(s.Items) != 1000 || s.Next == nil || *s.Next != "p/01000" {
		t.Fatalf("default limit: %d items, next %v", len(s.Items), s.Next)
	}
	if s := e.scan("limit=10000"); len(s.Items) != n+20 || s.Next != nil {
		t.Fatalf("whole scan: %d items, next %v", len(s.Items), s.Next)
	}
	// An exact last page has no next.
	if s := e.scan("prefix=q/&limit=10"); len(s.Items) != 10 || s.Next != nil {
		t.Fatalf("exact page: %d items, next %v", len(s.Items), s.Next)
	}
	// An empty prefix range.
	if s := e.scan("prefix=zzz"); len(s.Items) != 0 || s.Next != nil {
		t.Fatalf("empty scan: %+v", s)
	}
}

func TestScanLimits(t *testing.T) {
	e := newEnv(t, Config{MaxScanLimit: 50, DefaultScanLimit: 20, MaxResponseBytes: 300}, store.Options{})
	fill(t, e.st, "k", 100)
	// Each item is about 40 bytes of JSON: a 300-byte page holds a few.
	var all []scanItem
	start := ""
	for pages := 0; ; pages++ {
		s := e.scan("limit=1000&start=" + url.QueryEscape(start))
		if len(s.Items) == 0 || len(s.Items) > 20 {
			t.Fatalf("page of %d items", len(s.Items))
		}
		all = append(all, s.Items...)
		if s.Next == nil {
			break
		}
		start = *s.Next
		if pages > 100 {
			t.Fatal("no progress")
		}
	}
	if len(all) != 100 {
		t.Fatalf("%d items over all pages", len(all))
	}
	for i, it := range all {
		if it.Key != fmt.Sprintf("k%05d", i) {
			t.Fatalf("item %d is %q", i, it.Key)
		}
	}
	// A value larger than the page budget still comes, alone.
	e.put("big", string(make([]byte, 1000)))
	s := e.scan("prefix=b")
	if len(s.Items) != 1 || len(s.Items[0].Value) != 1000 {
		t.Fatalf("oversized item: %+v", s)
	}
	// limit above MaxScanLimit is lowered.
	e2 := newEnv(t, Config{MaxScanLimit: 50, DefaultScanLimit: 20}, store.Options{})
	fill(t, e2.st, "k", 100)
	if s := e2.scan("limit=1000"); len(s.Items) != 50 || s.Next == nil {
		t.Fatalf("limit capped: %d items", len(s.Items))
	}
	if s := e2.scan(""); len(s.Items) != 20 {
		t.Fatalf("default limit: %d items", len(s.Items))
	}
}

func TestMget(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("a", "A")
	e.put("b/c", "BC")
	e.put("ü", "U")
	r := e.do("POST", "/v1/db/mget", jsonBody(t, map[string]any{"keys": []string{"a", "missing", "b/c", "a", "ü"}}))
	if r.status != 200 {
		t.Fatalf("mget: %d %s", r.status, r.body)
	}
	var m mgetReply
	mustDecode(t, r.body, &m)
	if m.Index != 3 || len(m.Values) != 3 || string(m.Values["a"]) != "A" || string(m.Values["b/c"]) != "BC" || string(m.Values["ü"]) != "U" {
		t.Fatalf("mget: %s", r.body)
	}
	r = e.do("POST", "/v1/db/mget", []byte(`{"keys":[]}`))
	var empty mgetReply
	mustDecode(t, r.body, &empty)
	if r.status != 200 || empty.Values == nil || len(empty.Values) != 0 {
		t.Fatalf("empty mget: %d %s", r.status, r.body)
	}
}

// TestMgetConsistent checks that mget reads every key at one index while a
// writer changes all keys together in each batch.
func TestMgetConsistent(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	keys := []string{"c/1", "c/2", "c/3", "c/4"}
	write := func(i int) {
		var ops []wal.Op
		for _, k := range keys {
			ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(strconv.Itoa(i))})
		}
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: ops}); err != nil {
			t.Error(err)
		}
	}
	write(0)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; !stop.Load(); i++ {
			write(i)
		}
	}()
	body := jsonBody(t, map[string]any{"keys": keys})
	seen := map[string]bool{}
	for n := 0; n < 200; n++ {
		r := e.do("POST", "/v1/db/mget", body)
		var m mgetReply
		mustDecode(t, r.body, &m)
		v := string(m.Values[keys[0]])
		for _, k := range keys {
			if string(m.Values[k]) != v {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("mget at index %d mixes values: %s", m.Index, r.body)
			}
		}
		seen[v] = true
	}
	stop.Store(true)
	wg.Wait()
	if len(seen) < 2 {
		t.Logf("only %d distinct states seen; the writer may have been slow", len(seen))
	}
}

func TestMinIndexReadYourWrites(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	e.put("k", "old") // 1
	want := e.st.AppliedIndex() + 1
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k"), Value: []byte("new")}}}); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	r := e.do("GET", keyPath("k")+"?min_index="+strconv.FormatUint(want, 10)+"&timeout=10s", nil)
	took := time.Since(start)
	<-done
	if r.status != 200 || string(r.body) != "new" {
		t.Fatalf("min_index read: %d %q", r.status, r.body)
	}
	if r.header.Get("Qs-Applied-Index") != strconv.FormatUint(want, 10) {
		t.Fatalf("Qs-Applied-Index %q, want %d", r.header.Get("Qs-Applied-Index"), want)
	}
	if took < 40*time.Millisecond {
		t.Fatalf("read did not wait (%v)", took)
	}
	// Already applied: no wait.
	if r := e.do("GET", keyPath("k")+"?min_index=1", nil); string(r.body) != "new" {
		t.Fatalf("min_index already applied: %d %q", r.status, r.body)
	}
	// Scan and mget wait too.
	next := strconv.FormatUint(want+1, 10)
	done = make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k2"), Value: []byte("v2")}}}); err != nil {
			t.Error(err)
		}
	}()
	if s := e.scan("min_index=" + next + "&timeout=10s"); s.Index < want+1 || len(s.Items) != 2 {
		t.Fatalf("scan with min_index: %+v", s)
	}
	r = e.do("POST", "/v1/db/mget?min_index="+next, []byte(`{"keys":["k2"]}`))
	var m mgetReply
	mustDecode(t, r.body, &m)
	if string(m.Values["k2"]) != "v2" {
		t.Fatalf("mget with min_index: %s", r.body)
	}
}

func TestMinIndexTimeout(t *testing.T) {
	e := newEnv(t, Config{MaxWait: 200 * time.Millisecond, DefaultWait: 100 * time.Millisecond}, store.Options{})
	e.put("k", "v")
	applied := e.st.AppliedIndex()
	check := func(r resp, atLeast time.Duration, took time.Duration) {
		t.Helper()
		er := mustError(t, r, 504, "timeout")
		if er.Error.AppliedIndex == nil || *er.Error.AppliedIndex != applied {
			t.Fatalf("timeout body applied_index %v, want %d: %s", er.Error.AppliedIndex, applied, r.body)
		}
		if r.header.Get("Qs-Applied-Index") != strconv.FormatUint(applied, 10) {
			t.Fatalf("timeout Qs-Applied-Index %q, want %d", r.header.Get("Qs-Applied-Index"), applied)
		}
		if took < atLeast || took > 60*time.Second {
			t.Fatalf("timeout after %v, want about %v", took, atLeast)
		}
	}
	for _, c := range []struct {
		query string
		wait  time.Duration
	}{
		{"timeout=30ms", 30 * time.Millisecond},
		{"", 100 * time.Millisecond},           // DefaultWait
		{"timeout=1h", 200 * time.Millisecond}, // capped at MaxWait
	} {
		q := "?min_index=" + strconv.FormatUint(applied+5, 10)
		if c.query != "" {
			q += "&" + c.query
		}
		start := time.Now()
		r := e.do("GET", keyPath("k")+q, nil)
		check(r, c.wait, time.Since(start))
	}
	start := time.Now()
	r := e.do("GET", "/v1/db/keys?min_index="+strconv.FormatUint(applied+5, 10)+"&timeout=20ms", nil)
	check(r, 20*time.Millisecond, time.Since(start))
	start = time.Now()
	r = e.do("POST", "/v1/db/mget?min_index="+strconv.FormatUint(applied+5, 10)+"&timeout=20ms", []byte(`{"keys":["k"]}`))
	check(r, 20*time.Millisecond, time.Since(start))
}

func TestStatus(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	get := func() map[string]any {
		t.Helper()
		r := e.do("GET", "/v1/db/status", nil)
		if r.status != 200 {
			t.Fatalf("status: %d %s", r.status, r.body)
		}
		var m map[string]any
		mustDecode(t, r.body, &m)
		return m
	}
	m := get()
	for _, f := range []string{"db", "node", "role", "db_id", "applied_index", "applied_time", "keys", "key_bytes", "value_bytes", "log_first_index", "disk_bytes", "disk_full"} {
		if _, ok := m[f]; !ok {
			t.Errorf("status lacks %q: %v", f, m)
		}
	}
	if m["db"] != "db" || m["node"] != "node-a" || m["role"] != "root" || m["db_id"] != e.st.DBID().String() || m["applied_time"] != nil || m["disk_full"] != false {
		t.Fatalf("fresh status: %v", m)
	}
	e.put("key", "value")
	m = get()
	if m["applied_index"] != 1.0 || m["keys"] != 1.0 || m["key_bytes"] != 3.0 || m["value_bytes"] != 5.0 || m["log_first_index"] != 1.0 {
		t.Fatalf("status after a write: %v", m)
	}
	ts, ok := m["applied_time"].(string)
	if !ok {
		t.Fatalf("applied_time %v", m["applied_time"])
	}
	if at, err := time.Parse(time.RFC3339Nano, ts); err != nil || time.Since(at) > time.Minute {
		t.Fatalf("applied_time %q: %v", ts, err)
	}
	// Replica role from CanWrite, then role and extra fields from Status.
	e.setWriteErr(errNotRootTest)
	if m = get(); m["role"] != "replica" {
		t.Fatalf("role with CanWrite refusing: %v", m["role"])
	}
	e.db.Status = func() map[string]any {
		return map[string]any{"role": "proxy", "upstream": "root-node:7000", "applied_index": "must not win"}
	}
	m = get()
	if m["role"] != "proxy" || m["upstream"] != "root-node:7000" || m["applied_index"] != 1.0 {
		t.Fatalf("status with Database.Status: %v", m)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	r := e.do("GET", "/healthz", nil)
	if r.status != 200 || string(r.body) != "ok" {
		t.Fatalf("healthz: %d %q", r.status, r.body)
	}
	e.put("k", "v")
	e.do("GET", keyPath("k"), nil)
	e.do("GET", keyPath("nope/with/a/long/path"), nil)
	e.do("GET", "/v1/unknown-db/keys/k", nil)
	r = e.do("GET", "/metrics", nil)
	if r.status != 200 || !containsStr(r.body, "go_goroutines") {
		t.Fatalf("metrics: %d %.200q", r.status, r.body)
	}
	// The handler counts in its own Metrics, which the server registers
	// with the registry /metrics serves.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.m)
	body := exposition(t, reg)
	for _, want := range []string{
		`qs_http_requests_total{code="200",db="db",route="get"}`,
		`qs_http_requests_total{code="404",db="db",route="get"}`,
		`qs_http_requests_total{code="404",db="",route="get"}`,
		`qs_http_requests_total{code="200",db="db",route="put"}`,
		`qs_http_errors_total{kind="unknown_database"}`,
		`qs_http_errors_total{kind="integrity"}`,
		`qs_http_request_duration_seconds_bucket{route="scan",le=`,
		`qs_http_min_index_wait_seconds_count`,
		`qs_http_min_index_timeouts_total`,
	} {
		if !containsStr(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if containsStr(body, "nope/with") || containsStr(body, "unknown-db") {
		t.Error("metrics carry raw paths or unknown database names")
	}
}
