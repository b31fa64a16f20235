package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"
)

// TestProducerGateway runs qs serve with a producers file made by qs token
// and checks, through real HTTP and memcached connections: no token and
// wrong token (401), a forbidden key alone and inside a batch (403, the
// batch not applied), a quota (429 with Retry-After, counted in
// /metrics), memcached writes refused, reads open, qs put with a token
// file, qs usage, and reloads without restart (SIGHUP, then the file
// poll): a new token works and a removed one is refused.
func TestProducerGateway(t *testing.T) {
	dir := t.TempDir()
	appToken := filepath.Join(dir, "app.token")
	entry, code := runQS(t, "token", "--name", "app", "--prefix", "app/", "--out", appToken)
	if code != 0 {
		t.Fatalf("qs token: %d %s", code, entry)
	}
	slowToken := filepath.Join(dir, "slow.token")
	slowEntry, code := runQS(t, "token", "--name", "slow", "--prefix", "slow/", "--db", "default", "--out", slowToken)
	if code != 0 {
		t.Fatalf("qs token: %d %s", code, slowEntry)
	}
	producers := filepath.Join(dir, "producers.toml")
	writeAtomic(t, producers, "max_wait = \"0s\"\n\n"+entry+"\n"+slowEntry+"ops_per_second = 0.1\nops_burst = 1\n")

	p := startQS(t, filepath.Join(dir, "data"), "--producers", producers)
	base := "http://" + p.Addr["http"] + "/v1/default"
	app, slow := readFile(t, appToken), readFile(t, slowToken)

	// 401 without a token, with a wrong one; nothing written.
	r := httpDo(t, "", "PUT", base+"/keys/app/a", "1")
	if r.status != 401 || r.code != "unauthenticated" || r.header.Get("WWW-Authenticate") != `Bearer realm="qs"` {
		t.Fatalf("PUT without token: %+v", r)
	}
	r = httpDo(t, "qs_wrong", "PUT", base+"/keys/app/a", "1")
	if r.status != 401 || r.code != "invalid_token" || !strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("PUT with a wrong token: %+v", r)
	}
	if r = httpDo(t, "", "GET", base+"/keys/app/a", ""); r.status != 404 {
		t.Fatalf("a refused write was applied: %+v", r)
	}

	// The right token writes its prefixes, and only them.
	if r = httpDo(t, app, "PUT", base+"/keys/app/a", "1"); r.status != 200 {
		t.Fatalf("PUT with the app token: %+v", r)
	}
	r = httpDo(t, app, "PUT", base+"/keys/slow/a", "1")
	if r.status != 403 || r.code != "forbidden" || !strings.Contains(r.body, `"key":"slow/a"`) || !strings.Contains(r.body, `"allowed_prefixes":["app/"]`) {
		t.Fatalf("PUT outside the prefixes: %+v", r)
	}
	batch := `{"ops":[{"op":"set","key":"app/b","value":"Mg=="},{"op":"del","key":"slow/x"}]}`
	if r = httpDo(t, app, "POST", base+"/batch", batch); r.status != 403 || !strings.Contains(r.body, "op 1") {
		t.Fatalf("batch with a forbidden op: %+v", r)
	}
	if r = httpDo(t, "", "GET", base+"/keys/app/b", ""); r.status != 404 {
		t.Fatalf("refused batch partly applied: %+v", r)
	}

	// Quota: 0.1 op/s, bucket of 1, no wait: the second write is refused.
	if r = httpDo(t, slow, "PUT", base+"/keys/slow/1", "1"); r.status != 200 {
		t.Fatalf("first slow write: %+v", r)
	}
	r = httpDo(t, slow, "PUT", base+"/keys/slow/2", "2")
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); r.status != 429 || r.code != "quota_exceeded" || ra < 1 || ra > 10 {
		t.Fatalf("write over quota: %+v", r)
	}
	metrics := httpDo(t, "", "GET", "http://"+p.Addr["http"]+"/metrics", "").body
	for _, want := range []string{
		`qs_gateway_rejections_total{producer="slow",reason="quota_ops"} 1`,
		`qs_gateway_rejections_total{producer="",reason="unauthenticated"} 1`,
		`qs_gateway_rejections_total{producer="app",reason="forbidden"} 2`,
		`qs_gateway_requests_total{producer="app"} 1`,
		`qs_gateway_producers 2`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// memcached: reads open, writes refused.
	mc := gomemcache.New(p.Addr["memcache"])
	if it, err := mc.Get("app/a"); err != nil || string(it.Value) != "1" {
		t.Fatalf("memcached get: %v %v", it, err)
	}
	if err := mc.Set(&gomemcache.Item{Key: "app/c", Value: []byte("x")}); err == nil || !strings.Contains(err.Error(), "producers are configured") {
		t.Fatalf("memcached set with producers configured: %v", err)
	}

	// The CLI: qs put with a token file, qs usage.
	if out, code := runQS(t, "put", "--addr", p.Addr["http"], "--token-file", appToken, "app/cli", "hello"); code != 0 {
		t.Fatalf("qs put --token-file: %d %s", code, out)
	}
	if out, code := runQS(t, "put", "--addr", p.Addr["http"], "app/cli", "hello"); code == 0 || !strings.Contains(out, "unauthenticated") {
		t.Fatalf("qs put without token: %d %s", code, out)
	}
	out, code := runQS(t, "usage", "--addr", p.Addr["http"], "--json")
	if code != 0 {
		t.Fatalf("qs usage: %d %s", code, out)
	}
	var rep struct {
		Producers []struct {
			Name          string `json:"name"`
			Keys          int64  `json:"keys"`
			KeyBytes      int64  `json:"key_bytes"`
			ValueBytes    int64  `json:"value_bytes"`
			OverheadBytes int64  `json:"overhead_bytes"`
		} `json:"producers"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Producers) != 2 {
		t.Fatalf("qs usage --json: %v %s", err, out)
	}
	// app/a = "1", app/cli = "hello": 22 bytes of overhead per inline key.
	if a := rep.Producers[0]; a.Name != "app" || a.Keys != 2 || a.KeyBytes != 5+7 || a.ValueBytes != 1+5 || a.OverheadBytes != 44 {
		t.Errorf("usage of app: %+v", a)
	}
	if out, code := runQS(t, "usage", "--addr", p.Addr["http"], "--producer", "app"); code != 0 || !strings.Contains(out, `"app/"`) {
		t.Errorf("qs usage --producer app: %d %s", code, out)
	}

	// Reload on SIGHUP: a new producer replaces app.
	newToken := filepath.Join(dir, "new.token")
	newEntry, code := runQS(t, "token", "--name", "new", "--prefix", "app/", "--out", newToken)
	if code != 0 {
		t.Fatal(newEntry)
	}
	fresh := readFile(t, newToken)
	writeAtomic(t, producers, newEntry)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, fresh, "PUT", base+"/keys/app/new", 200)
	if r = httpDo(t, app, "PUT", base+"/keys/app/a", "2"); r.status != 401 || r.code != "invalid_token" {
		t.Fatalf("removed token after SIGHUP: %+v", r)
	}
	// Reload by the file poll alone: app comes back, new goes.
	writeAtomic(t, producers, entry)
	waitStatus(t, app, "PUT", base+"/keys/app/a", 200)
	if r = httpDo(t, fresh, "PUT", base+"/keys/app/new", "x"); r.status != 401 {
		t.Fatalf("removed token after the poll: %+v", r)
	}
	// An invalid file keeps the producers in force.
	writeAtomic(t, producers, "[[producer]]\nname = \"broken\"\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "producers file not reloaded")
	if r = httpDo(t, app, "PUT", base+"/keys/app/a", "3"); r.status != 200 {
		t.Fatalf("invalid file dropped the producers in force: %+v", r)
	}
	p.stop()
}

type httpAnswer struct {
	status int
	code   string
	header http.Header
	body   string
}

// httpDo sends one request, with a bearer token unless token is empty.
func httpDo(t *testing.T, token, method, url, body string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := httpAnswer{status: res.StatusCode, header: res.Header, body: string(b)}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if res.StatusCode >= 400 && json.Unmarshal(b, &e) == nil {
		a.code = e.Error.Code
	}
	return a
}

// waitStatus repeats a request until it is answered with status (10s at
// most: the file poll runs every 2s).
func waitStatus(t *testing.T, token, method, url string, status int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := httpDo(t, token, method, url, "v")
		if r.status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s still answered %+v after 10s", method, url, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits up to 10s for a line of the process's output to contain s.
func waitLog(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sc := bufio.NewScanner(bytes.NewReader([]byte(p.out.String())))
		for sc.Scan() {
			if strings.Contains(sc.Text(), s) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in 10s:\n%s", s, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestNoProducersOpenWrites: without a producers file writes need no token
// (development), and the server says so at startup.
func TestNoProducersOpenWrites(t *testing.T) {
	p := startQS(t, t.TempDir())
	if r := httpDo(t, "", "PUT", "http://"+p.Addr["http"]+"/v1/default/keys/k", "v"); r.status != 200 {
		t.Fatalf("open write: %+v", r)
	}
	waitLog(t, p, "no producers_file: writes are open")
	p.stop()
}
