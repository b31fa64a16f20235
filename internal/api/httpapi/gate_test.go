package httpapi

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/store"
)

// gateEnv is an env whose database "db" has a Gate with two producers:
// "<prefix>-app" writing app/ and shared/app/ at 0.2 ops/s (burst 2, no
// wait), and "<prefix>-admin" writing everything without limits. The
// prefix names the producers in metric series.
type gateEnv struct {
	*env
	app, admin string // tokens
	path       string // producers file
	// metrics gathers the gateway's Metrics and the HTTP API's collectors.
	metrics prometheus.Gatherer
}

func newGateEnv(t testing.TB, name string) *gateEnv {
	t.Helper()
	e := &gateEnv{env: newEnv(t, Config{}, store.Options{})}
	var appHash, adminHash string
	e.app, appHash = gateway.NewToken()
	e.admin, adminHash = gateway.NewToken()
	e.path = filepath.Join(t.TempDir(), "producers.toml")
	content := fmt.Sprintf(`
max_wait = "0s"

[[producer]]
name = "%[1]s-app"
tokens = [%[2]q]
prefixes = ["app/", "shared/app/"]
ops_per_second = 0.2
ops_burst = 2

[[producer]]
name = "%[1]s-admin"
tokens = [%[3]q]
prefixes = [""]
`, name, appHash, adminHash)
	if err := os.WriteFile(e.path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	gm := gateway.NewMetrics()
	g, err := gateway.Open(gateway.Options{Path: e.path, Logger: slog.New(slog.DiscardHandler), Metrics: gm})
	if err != nil {
		t.Fatal(err)
	}
	e.db.Gate = g
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(gm, e.m)
	e.metrics = reg
	return e
}

// doAs sends a request with "Authorization: Bearer token" (none if empty).
func (e *gateEnv) doAs(token, method, path string, body []byte) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return e.send(req)
}

// gateErr is the error body of the gateway's refusals.
type gateErr struct {
	Error struct {
		Code              string   `json:"code"`
		Message           string   `json:"message"`
		Producer          string   `json:"producer"`
		Key               *string  `json:"key"`
		AllowedPrefixes   []string `json:"allowed_prefixes"`
		Quota             string   `json:"quota"`
		RetryAfterSeconds int      `json:"retry_after_seconds"`
	} `json:"error"`
}

func mustGateError(t *testing.T, r resp, status int, code string) gateErr {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s): %s", r.status, status, code, r.body)
	}
	var e gateErr
	mustDecode(t, r.body, &e)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error %+v, want code %q", e.Error, code)
	}
	return e
}

func batchBody(ops ...[2]string) []byte {
	var b strings.Builder
	b.WriteString(`{"ops":[`)
	for i, o := range ops {
		if i > 0 {
			b.WriteByte(',')
		}
		if o[1] == "" {
			fmt.Fprintf(&b, `{"op":"del","key":%q}`, o[0])
		} else {
			fmt.Fprintf(&b, `{"op":"set","key":%q,"value":%q}`, o[0], b64(o[1]))
		}
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func TestGateAuthentication(t *testing.T) {
	e := newGateEnv(t, "gate-auth")
	writes := []struct{ method, path, body string }{
		{"PUT", keyPath("app/k"), "v"},
		{"DELETE", keyPath("app/k"), ""},
		{"POST", "/v1/db/batch", string(batchBody([2]string{"app/k", "v"}))},
	}
	for _, w := range writes {
		r := e.doAs("", w.method, w.path, []byte(w.body))
		mustGateError(t, r, 401, "unauthenticated")
		if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="qs"` {
			t.Errorf("%s without token: WWW-Authenticate %q", w.method, got)
		}
		r = e.doAs("qs_not-a-token", w.method, w.path, []byte(w.body))
		mustGateError(t, r, 401, "invalid_token")
		if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="qs", error="invalid_token"` {
			t.Errorf("%s with a wrong token: WWW-Authenticate %q", w.method, got)
		}
		req, _ := http.NewRequest(w.method, e.srv.URL+w.path, strings.NewReader(w.body))
		req.Header.Set("Authorization", "Basic "+e.app)
		mustGateError(t, e.send(req), 401, "unauthenticated")
	}
	if a := e.st.AppliedIndex(); a != 0 {
		t.Fatalf("refused writes moved the applied index to %d", a)
	}
	// The right token writes; reads need none.
	mustWriteOK(t, e.doAs(e.app, "PUT", keyPath("app/k"), []byte("v")))
	for _, p := range []string{keyPath("app/k"), "/v1/db/keys?prefix=app/", "/v1/db/status", "/v1/db/usage"} {
		if r := e.doAs("", "GET", p, nil); r.status != 200 {
			t.Errorf("GET %s without token: %d %s", p, r.status, r.body)
		}
	}
	if r := e.doAs("", "POST", "/v1/db/mget", []byte(`{"keys":["app/k"]}`)); r.status != 200 {
		t.Errorf("mget without token: %d %s", r.status, r.body)
	}
}

func TestGateForbidden(t *testing.T) {
	e := newGateEnv(t, "gate-acl")
	mustWriteOK(t, e.doAs(e.admin, "PUT", keyPath("other/k"), []byte("admin wrote it")))
	applied := e.st.AppliedIndex()

	for _, c := range []struct{ method, key string }{{"PUT", "other/k"}, {"DELETE", "other/k"}, {"PUT", "shared/ap"}, {"PUT", "ap"}} {
		er := mustGateError(t, e.doAs(e.app, c.method, keyPath(c.key), []byte("x")), 403, "forbidden")
		if er.Error.Key == nil || *er.Error.Key != c.key || er.Error.Producer != "gate-acl-app" ||
			strings.Join(er.Error.AllowedPrefixes, ",") != "app/,shared/app/" || !strings.Contains(er.Error.Message, "app/") {
			t.Errorf("%s %s: %+v", c.method, c.key, er.Error)
		}
	}
	// One forbidden op in the middle of a batch refuses the whole batch.
	er := mustGateError(t, e.doAs(e.app, "POST", "/v1/db/batch", batchBody(
		[2]string{"app/1", "one"}, [2]string{"other/k", ""})), 403, "forbidden")
	if *er.Error.Key != "other/k" || !strings.Contains(er.Error.Message, "op 1") {
		t.Errorf("batch: %+v", er.Error)
	}
	if a := e.st.AppliedIndex(); a != applied {
		t.Fatalf("refused writes moved the applied index from %d to %d", applied, a)
	}
	if r := e.do("GET", keyPath("app/1"), nil); r.status != 404 {
		t.Errorf("app/1 written by a refused batch: %d %q", r.status, r.body)
	}
	if r := e.do("GET", keyPath("other/k"), nil); string(r.body) != "admin wrote it" {
		t.Errorf("other/k changed by a refused write: %q", r.body)
	}
	mustWriteOK(t, e.doAs(e.app, "PUT", keyPath("shared/app/x"), []byte("1")))
	// Conditions on keys outside the prefixes are reads: allowed.
	body := fmt.Sprintf(`{"ops":[{"op":"set","key":"app/1","value":%q}],"if":[{"key":"other/k","index":1}]}`, b64("one"))
	mustWriteOK(t, e.doAs(e.app, "POST", "/v1/db/batch", []byte(body)))
}

func TestGateQuota(t *testing.T) {
	e := newGateEnv(t, "gate-quota")
	rejected := `qs_gateway_rejections_total{producer="gate-quota-app",reason="quota_ops"}`
	errs := `qs_http_errors_total{kind="quota_exceeded"}`
	r0, e0 := scrape(t, e, rejected), scrape(t, e, errs)

	mustWriteOK(t, e.doAs(e.app, "PUT", keyPath("app/1"), []byte("1")))
	mustWriteOK(t, e.doAs(e.app, "POST", "/v1/db/batch", batchBody([2]string{"app/2", "2"})))
	applied := e.st.AppliedIndex()
	r := e.doAs(e.app, "PUT", keyPath("app/3"), []byte("3"))
	er := mustGateError(t, r, 429, "quota_exceeded")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra != er.Error.RetryAfterSeconds || er.Error.Quota != "ops" || er.Error.Producer != "gate-quota-app" {
		t.Errorf("429: Retry-After %q, body %+v", r.header.Get("Retry-After"), er.Error)
	}
	if a := e.st.AppliedIndex(); a != applied {
		t.Fatalf("a refused write moved the applied index")
	}
	if d := scrape(t, e, rejected) - r0; d != 1 {
		t.Errorf("%s moved by %v, want 1", rejected, d)
	}
	if d := scrape(t, e, errs) - e0; d != 1 {
		t.Errorf("%s moved by %v, want 1", errs, d)
	}
	// Another producer has its own quota.
	mustWriteOK(t, e.doAs(e.admin, "PUT", keyPath("app/3"), []byte("3")))
	// A batch larger than ops_burst can never pass: 413, not 429.
	mustGateError(t, e.doAs(e.app, "POST", "/v1/db/batch", batchBody([2]string{"app/4", "4"}, [2]string{"app/5", "5"}, [2]string{"app/6", "6"})), 413, "too_large")
	// Admitted writes are counted.
	if n := scrape(t, e, `qs_gateway_ops_total{producer="gate-quota-app"}`); n != 2 {
		t.Errorf("ops_total %v, want 2", n)
	}
	if n := scrape(t, e, `qs_gateway_bytes_total{producer="gate-quota-app"}`); n != 5+1+5+1 {
		t.Errorf("bytes_total %v, want 12", n)
	}
}

func TestGateReload(t *testing.T) {
	e := newGateEnv(t, "gate-reload")
	mustWriteOK(t, e.doAs(e.admin, "PUT", keyPath("k"), []byte("1")))
	tok, hash := gateway.NewToken()
	if err := os.WriteFile(e.path, []byte(fmt.Sprintf("[[producer]]\nname = \"gate-reload-new\"\ntokens = [%q]\nprefixes = [\"\"]\n", hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := e.db.Gate.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v %v", changed, err)
	}
	mustGateError(t, e.doAs(e.admin, "PUT", keyPath("k"), []byte("2")), 401, "invalid_token")
	mustWriteOK(t, e.doAs(tok, "PUT", keyPath("k"), []byte("3")))
}

func TestGateUsage(t *testing.T) {
	e := newGateEnv(t, "gate-usage")
	mustWriteOK(t, e.doAs(e.app, "POST", "/v1/db/batch", batchBody([2]string{"app/a", "12345"}, [2]string{"shared/app/b", "1"})))
	mustWriteOK(t, e.doAs(e.admin, "PUT", keyPath("zzz"), []byte("1234567")))
	r := e.do("GET", "/v1/db/usage?producer=gate-usage-app", nil)
	if r.status != 200 || r.header.Get("Qs-Applied-Index") != "2" {
		t.Fatalf("usage: %d %v %s", r.status, r.header, r.body)
	}
	var rep gateway.UsageReport
	mustDecode(t, r.body, &rep)
	if len(rep.Producers) != 1 || rep.Unowned != nil || rep.Total.Keys != 3 {
		t.Fatalf("usage of one producer: %s", r.body)
	}
	p := rep.Producers[0]
	// 22 bytes of overhead per inline key (docs/storage.md).
	if p.Name != "gate-usage-app" || p.Keys != 2 || p.KeyBytes != 5+12 || p.ValueBytes != 6 || p.OverheadBytes != 44 || p.StoredBytes != 67 || len(p.Prefixes) != 2 {
		t.Errorf("usage of gate-usage-app: %+v", p)
	}
	r = e.do("GET", "/v1/db/usage", nil)
	mustDecode(t, r.body, &rep)
	if len(rep.Producers) != 2 || rep.Unowned == nil || rep.Unowned.Keys != 0 {
		t.Errorf("usage: %s", r.body)
	}
	mustError(t, e.do("GET", "/v1/db/usage?producer=nobody", nil), 404, "not_found")
	mustError(t, e.do("GET", "/v1/db/usage?prodcer=x", nil), 400, "bad_request")
	mustError(t, e.do("POST", "/v1/db/usage", nil), 405, "method_not_allowed")
	// Without a gate: totals, every key unowned.
	e.db.Gate = nil
	r = e.do("GET", "/v1/db/usage", nil)
	mustDecode(t, r.body, &rep)
	if len(rep.Producers) != 0 || rep.Unowned == nil || rep.Unowned.Keys != 3 {
		t.Errorf("usage without gate: %s", r.body)
	}
}

// exposition is what /metrics would show of g.
func exposition(t *testing.T, g prometheus.Gatherer) []byte {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// scrape returns the value of one series of the gateway's and the HTTP
// API's metrics, as /metrics shows it (0 if absent).
func scrape(t *testing.T, e *gateEnv, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(exposition(t, e.metrics)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// BenchmarkGatePut compares PUTs through the handler without and with the
// gateway (token hash, prefix check, unlimited quota of the admin
// producer). The PUTs rewrite the same value, so the store answers
// "changed": false without an fsync and the gateway's share is visible.
func BenchmarkGatePut(b *testing.B) {
	for _, gated := range []bool{false, true} {
		name := "open"
		if gated {
			name = "gate"
		}
		b.Run(name, func(b *testing.B) {
			e := newGateEnv(b, "gate-bench")
			token := e.admin
			if !gated {
				e.db.Gate, token = nil, ""
			}
			body := bytes.Repeat([]byte("v"), 100)
			put := func() int {
				req := httptest.NewRequest("PUT", "/v1/db/keys/config/service/key", bytes.NewReader(body))
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				w := httptest.NewRecorder()
				e.h.ServeHTTP(w, req)
				return w.Code
			}
			if c := put(); c != 200 {
				b.Fatalf("status %d", c)
			}
			b.ReportAllocs()
			for b.Loop() {
				if c := put(); c != 200 {
					b.Fatalf("status %d", c)
				}
			}
		})
	}
}
