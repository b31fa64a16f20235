package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/blocksock"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeServeEnv); mode != "" {
		os.Exit(fakeServe(mode, os.Args[1:]))
	}
	// The scenarios' own bounds, for tests on a machine other work may
	// load: a connect or a request that takes seconds is slow, not wrong.
	dialTimeout = time.Minute
	os.Exit(m.Run())
}

// testConfig is a configuration small enough for 1-second phases.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Duration = time.Second
	cfg.Timeout = 30 * time.Second
	cfg.Conns = 4
	cfg.ReadLatWriters = []int{0, 1}
	cfg.ReadLatValueSize = 4 << 10
	cfg.Keys = 2000
	cfg.MultiKeys = 10
	cfg.BatchSizes = []int{1, 10}
	return cfg
}

type fakeTarget struct {
	st   *fakeStore
	mc   *fakeMC
	http *httptest.Server
	t    *Target
}

// newFakeTarget starts a fake memcached and, if withHTTP, a fake HTTP API
// on loopback ports.
func newFakeTarget(t *testing.T, name string, withHTTP bool) *fakeTarget {
	t.Helper()
	st := newFakeStore()
	mc, err := startFakeMC(st, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mc.Close)
	f := &fakeTarget{st: st, mc: mc, t: &Target{Name: name, Memcache: mc.Addr()}}
	if withHTTP {
		f.http = httptest.NewServer(fakeHTTP(st, "default"))
		t.Cleanup(f.http.Close)
		f.t.HTTP = strings.TrimPrefix(f.http.URL, "http://")
	}
	return f
}

func testLogf(t *testing.T) Logf {
	return func(format string, args ...any) { t.Logf(format, args...) }
}

// checkOp checks that an op has successes and ordered percentiles.
func checkOp(t *testing.T, ph *Phase, op string) *OpStats {
	t.Helper()
	s := ph.Op(op)
	if s == nil {
		t.Fatalf("%s/%s: no %q stats in %+v", ph.Name, ph.Target, op, ph.Ops)
	}
	l := s.Latency
	if s.Ops <= 0 || s.OpsPerSec <= 0 || s.Keys < s.Ops || l.Count != s.Ops {
		t.Errorf("%s/%s %s: implausible counts %+v", ph.Name, ph.Target, op, s)
	}
	if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("%s/%s %s: percentiles out of order: %+v", ph.Name, ph.Target, op, l)
	}
	return s
}

// forReaders runs fn with the readlat reader in each of its modes.
func forReaders(t *testing.T, fn func(t *testing.T, reader string)) {
	for _, r := range []string{ReaderThread, ReaderPoller} {
		t.Run(r, func(t *testing.T) { fn(t, r) })
	}
}

func TestReadLat(t *testing.T) { forReaders(t, testReadLat) }

func testReadLat(t *testing.T, reader string) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", false)
	b := newFakeTarget(t, "b", false)
	b.t.Baseline = true
	cfg := testConfig()
	cfg.ReadLatReader = reader
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t, b.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	// Phases alternate between targets.
	want := []string{"0 writers/a", "0 writers/b", "1 writer/a", "1 writer/b"}
	if len(res.Phases) != len(want) {
		t.Fatalf("got %d phases, want %d", len(res.Phases), len(want))
	}
	for i, ph := range res.Phases {
		if got := ph.Name + "/" + ph.Target; got != want[i] {
			t.Errorf("phase %d is %s, want %s", i, got, want[i])
		}
		if ph.Errors != 0 {
			t.Errorf("%s/%s: %d errors: %v (%s)", ph.Name, ph.Target, ph.Errors, ph.ErrorKinds, ph.FirstError)
		}
		if ph.Seconds < 1 || ph.Seconds > 3 {
			t.Errorf("%s/%s lasted %.2fs, want about 1s", ph.Name, ph.Target, ph.Seconds)
		}
		checkOp(t, &ph, "read")
		if ph.Name == "1 writer" {
			w := checkOp(t, &ph, "write")
			if w.Bytes != w.Ops*int64(cfg.ReadLatValueSize) || w.MBPerSec <= 0 {
				t.Errorf("write bytes %d for %d ops of %d bytes, %.2f MB/s", w.Bytes, w.Ops, cfg.ReadLatValueSize, w.MBPerSec)
			}
		} else if ph.Op("write") != nil {
			t.Errorf("%s has write stats", ph.Name)
		}
	}
	// The writers added new keys.
	if n := a.st.len(); n <= cfg.ReadLatKeys {
		t.Errorf("target a holds %d keys after the writers ran", n)
	}
	// Ratios of a against the baseline b: read in both phases, write in one.
	if len(res.Ratios) != 3 {
		t.Fatalf("got ratios %+v, want 3", res.Ratios)
	}
	for _, r := range res.Ratios {
		if r.Target != "a" || r.Baseline != "b" || r.P50 <= 0 || r.P99 <= 0 || r.P999 <= 0 || r.Throughput <= 0 {
			t.Errorf("implausible ratio %+v", r)
		}
	}
}

// With a write rate, the writers together send at most that many writes
// per second, however fast the server stores them (and, on a quiet
// machine, QS_BENCH=1, about that many: a loaded one sends fewer).
func TestReadLatWriteRate(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", false)
	cfg := testConfig()
	cfg.ReadLatWriters = []int{2}
	cfg.ReadLatWriteRate = 200
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	w := checkOp(t, &res.Phases[0], "write")
	if w.OpsPerSec <= 0 || w.OpsPerSec > 210 {
		t.Errorf("%.0f writes/s with a cap of %d", w.OpsPerSec, cfg.ReadLatWriteRate)
	}
	if os.Getenv("QS_BENCH") != "" && w.OpsPerSec < 150 {
		t.Errorf("%.0f writes/s with a cap of %d on a quiet machine", w.OpsPerSec, cfg.ReadLatWriteRate)
	}
}

func TestReadLatServerErrors(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", false)
	cfg := testConfig()
	cfg.ReadLatWriters = []int{1}
	// Loading works; then the server refuses every set.
	a.st.failAfter.Store(int64(cfg.ReadLatKeys))
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 1 {
		t.Fatalf("got %d phases", len(res.Phases))
	}
	ph := res.Phases[0]
	checkOp(t, &ph, "read")
	if ph.Errors == 0 || ph.ErrorKinds["server_error"] != ph.Errors || !strings.Contains(ph.FirstError, "SERVER_ERROR") {
		t.Errorf("errors %d %v %q, want all server_error", ph.Errors, ph.ErrorKinds, ph.FirstError)
	}
	if w := ph.Op("write"); w == nil || w.Ops != 0 {
		t.Errorf("write stats %+v, want 0 successful writes", w)
	}
	var buf bytes.Buffer
	rep := &Report{Results: []Result{*res}}
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "ERRORS: a returned errors in phase \"1 writer\"") {
		t.Errorf("the report does not say that a returned errors:\n%s", buf.String())
	}
}

func TestGet(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true) // loads via HTTP
	b := newFakeTarget(t, "b", false)
	b.t.Baseline = true
	cfg := testConfig()
	res, err := Get(context.Background(), cfg, []*Target{a.t, b.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := a.st.len(); n != cfg.Keys {
		t.Errorf("a holds %d keys, want %d", n, cfg.Keys)
	}
	if len(res.Phases) != 2 {
		t.Fatalf("got %d phases: %+v", len(res.Phases), res.Phases)
	}
	for _, ph := range res.Phases {
		if ph.Errors != 0 {
			t.Errorf("%s: %d errors: %v (%s)", ph.Target, ph.Errors, ph.ErrorKinds, ph.FirstError)
		}
		g := checkOp(t, &ph, "get")
		m := checkOp(t, &ph, "mget")
		if g.Keys != g.Ops || m.Keys != m.Ops*int64(cfg.MultiKeys) {
			t.Errorf("%s: keys: get %d for %d ops, mget %d for %d ops", ph.Target, g.Keys, g.Ops, m.Keys, m.Ops)
		}
		if m.Bytes != m.Keys*int64(cfg.ValueSize) {
			t.Errorf("%s: mget bytes %d for %d keys", ph.Target, m.Bytes, m.Keys)
		}
	}
	if len(res.Ratios) != 2 {
		t.Errorf("got ratios %+v, want get and mget", res.Ratios)
	}
}

func TestGetMissesAndServerErrors(t *testing.T) {
	defer checkNoLeaks(t)
	miss := newFakeTarget(t, "miss", false)
	miss.st.dropEvery.Store(50) // acknowledged, then forgotten
	fail := newFakeTarget(t, "fail", false)
	cfg := testConfig()
	go func() {
		for fail.st.sets.Load() < int64(cfg.Keys) {
			time.Sleep(time.Millisecond)
		}
		fail.st.failGets.Store(true)
	}()
	res, err := Get(context.Background(), cfg, []*Target{miss.t, fail.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 {
		t.Fatalf("got %d phases", len(res.Phases))
	}
	m, f := res.Phases[0], res.Phases[1]
	if m.ErrorKinds["miss"] == 0 || m.Op("get").Ops == 0 {
		t.Errorf("miss target: errors %v, get ops %d; want misses and successes", m.ErrorKinds, m.Op("get").Ops)
	}
	if f.Errors == 0 || f.ErrorKinds["server_error"] != f.Errors {
		t.Errorf("failing target: errors %d %v, want server_error only", f.Errors, f.ErrorKinds)
	}
	if res.Errors() != m.Errors+f.Errors {
		t.Errorf("Result.Errors %d != %d + %d", res.Errors(), m.Errors, f.Errors)
	}
}

func TestWrite(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true)
	noHTTP := newFakeTarget(t, "nohttp", false)
	cfg := testConfig()
	res, err := Write(context.Background(), cfg, []*Target{a.t, noHTTP.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "nohttp: skipped: no http address") {
		t.Fatalf("phases %+v notes %q: want 2 phases of a and nohttp skipped", res.Phases, res.Notes)
	}
	var keys int64
	for i, ph := range res.Phases {
		if ph.Errors != 0 {
			t.Errorf("%s: %d errors: %v (%s)", ph.Name, ph.Errors, ph.ErrorKinds, ph.FirstError)
		}
		s := checkOp(t, &ph, "batch")
		size := int64(cfg.BatchSizes[i])
		if s.Keys != s.Ops*size || s.Bytes != s.Keys*int64(cfg.ValueSize) || s.MBPerSec <= 0 {
			t.Errorf("%s: %d batches, %d keys, %d bytes", ph.Name, s.Ops, s.Keys, s.Bytes)
		}
		keys += s.Keys
	}
	if n := a.st.len(); int64(n) < keys {
		t.Errorf("server holds %d keys, bench acknowledged %d", n, keys)
	}

	a.st.failBatch.Store(true)
	cfg.BatchSizes = []int{5}
	res, err = Write(context.Background(), cfg, []*Target{a.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	ph := res.Phases[0]
	if ph.Errors == 0 || ph.ErrorKinds["http_500"] != ph.Errors || !strings.Contains(ph.FirstError, "fake failure") {
		t.Errorf("errors %d %v %q, want http_500", ph.Errors, ph.ErrorKinds, ph.FirstError)
	}
}

// TestTimeoutBoundsPhase: a server that never answers costs one timeout
// per connection, and the phase still ends.
// TestTimeoutBoundsPhase: a get the server never answers fails after the
// timeout; in thread mode too, where the reader is blocked in read(2).
func TestTimeoutBoundsPhase(t *testing.T) { forReaders(t, testTimeoutBoundsPhase) }

func testTimeoutBoundsPhase(t *testing.T, reader string) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", false)
	cfg := testConfig()
	cfg.ReadLatReader = reader
	cfg.ReadLatWriters = []int{0}
	cfg.Duration = 300 * time.Millisecond
	cfg.Timeout = 300 * time.Millisecond
	cfg.Slices = 1 // one hang: one timeout
	go func() {
		for a.st.sets.Load() < int64(cfg.ReadLatKeys) {
			time.Sleep(time.Millisecond)
		}
		a.st.hangGets.Store(true)
	}()
	start := time.Now()
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
	ph := res.Phases[0]
	if ph.ErrorKinds["timeout"] != 1 {
		t.Errorf("errors %v, want one timeout", ph.ErrorKinds)
	}
}

// TestInterrupt: canceling the run ends the phase at once and counts no
// errors for the aborted requests.
func TestInterrupt(t *testing.T) { forReaders(t, testInterrupt) }

func testInterrupt(t *testing.T, reader string) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true)
	cfg := testConfig()
	cfg.ReadLatReader = reader
	cfg.Duration = time.Minute
	for _, run := range []func(context.Context, Config, []*Target, Logf) (*Result, error){ReadLat, Get, Write} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		start := time.Now()
		res, err := run(ctx, cfg, []*Target{a.t}, testLogf(t))
		if err != context.Canceled {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %s to stop", d)
		}
		if res == nil || len(res.Phases) != 0 {
			t.Errorf("result %+v: want no (partial) phases", res)
		}
	}
}

func TestReportFormats(t *testing.T) {
	a := newFakeTarget(t, "qs", false)
	b := newFakeTarget(t, "memcached", false)
	b.t.Baseline = true
	cfg := testConfig()
	cfg.Duration = 200 * time.Millisecond
	cfg.ReadLatWriters = []int{0}
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t, b.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{
		Command: "qs bench readlat --target x", Started: time.Now(), Machine: ThisMachine(),
		Config: cfg, Targets: []Target{*a.t, *b.t}, Results: []Result{*res},
	}
	var text, md, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	t.Logf("text:\n%s\nmarkdown:\n%s", text.String(), md.String())
	for _, want := range []string{"PHASE", "0 writers", "memcached (base)", "qs / memcached", runtime.Version()} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	for _, want := range []string{"| phase | target | op |", "|---|---|---|--:|", "`qs bench readlat --target x`", "### readlat", "| 0 writers | qs | read |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown report lacks %q", want)
		}
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 1 || len(back.Results[0].Phases) != 2 || back.Results[0].Phases[0].Ops[0].Latency.P50 <= 0 {
		t.Errorf("JSON round trip lost results: %+v", back.Results)
	}
	if back.Machine.CPUs != runtime.NumCPU() || back.Config.Duration != cfg.Duration {
		t.Errorf("JSON round trip lost the machine or config: %+v %+v", back.Machine, back.Config)
	}
}

func TestRunTargets(t *testing.T) {
	defer checkNoLeaks(t)
	a := newFakeTarget(t, "a", true)
	b := newFakeTarget(t, "b", false)
	cfg := testConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Scenarios = []string{"write", "readlat"}
	cfg.Targets = []Target{*a.t, *b.t}
	cfg.Baseline = "b"
	rep, err := Run(context.Background(), cfg, "qs bench", testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Scenario != "write" || len(rep.Targets) != 2 || !rep.Targets[1].Baseline {
		t.Fatalf("report %+v", rep)
	}
	if rep.Targets[0].Version != "fake-1" {
		t.Errorf("version %q", rep.Targets[0].Version)
	}
	if rep.Errors() != 0 || len(rep.Results[1].Ratios) == 0 {
		t.Errorf("errors %d, ratios %+v", rep.Errors(), rep.Results[1].Ratios)
	}
}

// checkNoLeaks fails if goroutines of this package (other than the fake
// servers and the test itself) are still running shortly after a test.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	var leaked []string
	for range 100 {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "internal/bench.") && !strings.Contains(g, "fake") &&
				!strings.Contains(g, "checkNoLeaks") && !strings.Contains(g, "testing.tRunner") &&
				!strings.Contains(g, "TestMain") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
}

// TestSlicesTakeTurns: with 3 slices, the targets run each phase in turns
// (a, b, a, b, a, b) and each target's slices add up to one phase.
func TestSlicesTakeTurns(t *testing.T) {
	defer checkNoLeaks(t)
	a, b := newFakeTarget(t, "a", false), newFakeTarget(t, "b", false)
	b.t.Baseline = true
	cfg := testConfig()
	cfg.ReadLatWriters = []int{1}
	cfg.Duration = 600 * time.Millisecond
	cfg.Slices = 3
	var order []string
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		t.Log(msg)
		if strings.Contains(msg, "(slice ") {
			order = append(order, strings.Fields(strings.SplitN(msg, " on ", 2)[1])[0])
		}
	}
	res, err := ReadLat(context.Background(), cfg, []*Target{a.t, b.t}, logf)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "a,b,a,b,a,b" {
		t.Errorf("slices ran in the order %s", got)
	}
	if len(res.Phases) != 2 {
		t.Fatalf("%d phases, want one per target", len(res.Phases))
	}
	for i, ph := range res.Phases {
		if ph.Target != []string{"a", "b"}[i] || ph.Seconds < 0.55 || ph.Seconds > 1.5 {
			t.Errorf("phase %d: %s, %.2fs", i, ph.Target, ph.Seconds)
		}
		rd, wr := checkOp(t, &ph, "read"), checkOp(t, &ph, "write")
		if rd.Latency.Count != rd.Ops || wr.Ops == 0 {
			t.Errorf("phase %d: reads %+v, writes %+v", i, rd, wr)
		}
	}
	// Writers never rewrite a key, whatever the slice: every set is new.
	if n, sets := a.st.len(), a.st.sets.Load(); int64(n) != sets {
		t.Errorf("%d keys after %d sets", n, sets)
	}
	if len(res.Ratios) != 2 {
		t.Errorf("ratios %+v", res.Ratios)
	}
}

// TestReaderThreadBlocks: in thread mode the reader's connection is a
// blockingConn where the system has them, and its description says which
// way the reader waited.
func TestReaderThreadBlocks(t *testing.T) {
	a := newFakeTarget(t, "a", false)
	env := newPhaseEnv(context.Background(), &Config{Timeout: time.Second})
	s := &mcSession{addr: a.t.Memcache, env: env, blocking: true}
	defer s.close()
	if err := s.dial(); err != nil {
		t.Fatal(err)
	}
	_, isBlocking := s.c.conn.(*blockingConn)
	if isBlocking != blocksock.Supported {
		t.Fatalf("reader connection %T, blocking sockets supported: %v", s.c.conn, blocksock.Supported)
	}
	if !isBlocking {
		return
	}
	if _, _, err := s.c.getOne("00"); err != nil {
		t.Fatal(err)
	}
	if d := readerDesc(ReaderThread); !strings.Contains(d, "read(2)") {
		t.Errorf("description %q", d)
	}
	if d := readerDesc(ReaderPoller); !strings.Contains(d, "poller") {
		t.Errorf("description %q", d)
	}
}
