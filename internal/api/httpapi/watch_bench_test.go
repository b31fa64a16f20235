package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// TestWatchLoad measures what watchers cost readers on one node: GET
// latency without watchers, then with QS_WATCH_BENCH_WATCHERS watch
// streams open (default 5,000), under the same writer (100 writes/s) and
// reader load (2,000 GET/s from 4 clients), plus the delay from a write
// being submitted to a watcher reading its change.
//
// Watchers watch G distinct prefixes; the writer cycles through them, so
// each write reaches watchers/G streams. It runs two scenarios, G=50
// (each write reaches 100 watchers) and G=1 (the storm: every write
// reaches every watcher), or only G=QS_WATCH_BENCH_GROUPS when set.
//
// Each scenario alternates QS_WATCH_BENCH_ROUNDS rounds (default 6) of a
// phase without and a phase with watchers, QS_WATCH_BENCH_SECONDS each
// (default 5), so that load from other processes on the machine falls on
// both sides; it reports every round and all rounds pooled (the figure to
// quote: a single round swings with the machine's other load). Each phase
// starts after a forced GC and, with watchers, 1 s after the last one
// opened, so that it does not pay for the garbage of the setup.
//
// The server, the writer and the readers share this process. The watchers
// run in a child process (this test binary, TestWatchLoadClient), as
// watchers are other processes in production: the server's heap and GC
// then hold only its own side of the 5,000 connections.
// QS_WATCH_BENCH_INPROCESS=1 runs them in this process instead.
// QS_WATCH_BENCH_PROFILE_DIR=dir writes a CPU profile of each phase with
// watchers.
//
// The write budget adapts (watch.Budget.Run), as in qs serve.
// QS_WATCH_BENCH_RATE, QS_WATCH_BENCH_TURNS and QS_WATCH_BENCH_TARGET_US
// override its limits (watch.Limits.WriteRate, WriteConcurrency,
// WakeDelayTarget); QS_WATCH_BENCH_FIXED=1 keeps its rate at WriteRate.
// To compare two budgets in the same run, each round can add a phase with
// another budget on a hub of its own: a fixed rate
// (QS_WATCH_BENCH_COMPARE_RATE=N writes/s) or another target
// (QS_WATCH_BENCH_COMPARE_TARGET_US). It runs only with QS_WATCH_BENCH=1:
//
//	QS_WATCH_BENCH=1 go test -count=1 -run 'TestWatchLoad$' -v -timeout 30m ./internal/api/httpapi
func TestWatchLoad(t *testing.T) {
	if os.Getenv("QS_WATCH_BENCH") == "" {
		t.Skip("set QS_WATCH_BENCH=1 to run the watch load benchmark")
	}
	o := watchLoadOptions{
		watchers:  envInt(t, "QS_WATCH_BENCH_WATCHERS", 5000),
		rounds:    envInt(t, "QS_WATCH_BENCH_ROUNDS", 6),
		phase:     time.Duration(envInt(t, "QS_WATCH_BENCH_SECONDS", 5)) * time.Second,
		inProcess: os.Getenv("QS_WATCH_BENCH_INPROCESS") != "",
		limits:    watch.DefaultLimits(),
	}
	if os.Getenv("QS_WATCH_BENCH_RATE") != "" {
		o.limits.WriteRate = float64(envInt(t, "QS_WATCH_BENCH_RATE", 1))
	}
	if os.Getenv("QS_WATCH_BENCH_TURNS") != "" {
		o.limits.WriteConcurrency = envInt(t, "QS_WATCH_BENCH_TURNS", 1)
	}
	o.fixed = os.Getenv("QS_WATCH_BENCH_FIXED") != ""
	if os.Getenv("QS_WATCH_BENCH_TARGET_US") != "" {
		o.limits.WakeDelayTarget = time.Duration(envInt(t, "QS_WATCH_BENCH_TARGET_US", 1)) * time.Microsecond
	}
	if os.Getenv("QS_WATCH_BENCH_COMPARE_RATE") != "" {
		c := o.limits
		c.WriteRate = float64(envInt(t, "QS_WATCH_BENCH_COMPARE_RATE", 1))
		o.compare = &c
	}
	if os.Getenv("QS_WATCH_BENCH_COMPARE_TARGET_US") != "" {
		c := o.limits
		c.WakeDelayTarget = time.Duration(envInt(t, "QS_WATCH_BENCH_COMPARE_TARGET_US", 1)) * time.Microsecond
		o.compare = &c
		o.compareAdaptive = true
	}
	scenarios := []int{50, 1}
	if os.Getenv("QS_WATCH_BENCH_GROUPS") != "" {
		scenarios = []int{envInt(t, "QS_WATCH_BENCH_GROUPS", 50)}
	}
	t.Logf("GOMAXPROCS=%d NumCPU=%d; watchers in a child process: %v; write budget up to %.0f/s (adaptive: %v, wake delay target %v), burst %d, %d at a time; load average before: %s",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), !o.inProcess, o.limits.WriteRate, !o.fixed, o.limits.WakeDelayTarget, o.limits.WriteBurst, o.limits.WriteConcurrency, loadAverage())
	for _, groups := range scenarios {
		o.groups = groups
		t.Run(fmt.Sprintf("prefixes=%d", groups), func(t *testing.T) { watchLoad(t, o) })
	}
	t.Logf("load average after: %s", loadAverage())
}

type watchLoadOptions struct {
	watchers, groups, rounds int
	phase                    time.Duration
	inProcess                bool
	limits                   watch.Limits  // MaxWatchers is set from watchers
	fixed                    bool          // the budget does not adapt: its rate stays at limits.WriteRate
	compare                  *watch.Limits // another budget measured too, in every round
	compareAdaptive          bool          // that budget adapts (else its rate is fixed)
}

// phaseStats is what one phase measured.
type phaseStats struct {
	reads  *hdrhistogram.Histogram // GET latency, µs
	cpu    float64                 // this process's CPU seconds per second
	gcs    uint32
	gcStop time.Duration // stop-the-world pauses
	hub    hubCounters   // delta over the phase
	wall   time.Duration
	writes int // writes the writer committed (it aims at writesPerS)
	budget budgetSamples
}

func watchLoad(t *testing.T, o watchLoadOptions) {
	const (
		keys        = 1000
		writesPerS  = 100
		readers     = 4
		readEveryUs = 2000 // per reader: 2,000 GET/s in all
	)
	e := newEnv(t, Config{}, store.Options{})
	l := o.limits
	l.MaxWatchers = o.watchers + 10
	first := fmt.Sprintf("target %v", l.WakeDelayTarget)
	if o.fixed {
		first = fmt.Sprintf("fixed %.0f/s", l.WriteRate)
	}
	variants := []*loadVariant{{name: first, limits: l, adaptive: !o.fixed}}
	if o.compare != nil {
		c := *o.compare
		c.MaxWatchers = l.MaxWatchers
		name := fmt.Sprintf("fixed %.0f/s", c.WriteRate)
		if o.compareAdaptive {
			name = fmt.Sprintf("target %v", c.WakeDelayTarget)
		}
		variants = append(variants, &loadVariant{name: name, limits: c, adaptive: o.compareAdaptive})
	}
	m := watch.NewMetrics() // of every variant's budget and hub, as of a process's
	for _, v := range variants {
		v.start(t, e, m)
	}
	for i := range keys {
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{setOp(fmt.Sprintf("cfg/%d/%d", i%o.groups, i), "initial value of some config key")}}); err != nil {
			t.Fatal(err)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: readers + 1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// run drives the writer and the readers for d.
	run := func(d time.Duration, budget *watch.Budget) phaseStats {
		runtime.GC()
		var ps phaseStats
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		written := 0
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		gc0, pause0 := ms.NumGC, ms.PauseTotalNs
		cpu0, hub0, start := processCPU(), readHubCounters(t, m), time.Now()
		stopSampling := sampleBudget(budget, &ps.budget)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // writer; the value is its submit time
			defer wg.Done()
			defer func() { ps.writes = written }()
			tick := time.NewTicker(time.Second / writesPerS)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				k := fmt.Sprintf("cfg/%d/%d", i%o.groups, rand.IntN(keys))
				v := strconv.FormatInt(time.Now().UnixNano(), 10)
				if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{setOp(k, v)}}); err != nil {
					t.Error(err)
					return
				}
				written++
			}
		}()
		hists := make([]*hdrhistogram.Histogram, readers)
		for r := range readers {
			hists[r] = hdrhistogram.New(1, 10_000_000, 3)
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(readEveryUs * time.Microsecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					i := rand.IntN(keys)
					url := fmt.Sprintf("%s/v1/db/keys/cfg/%d/%d", e.srv.URL, i%o.groups, i)
					start := time.Now()
					res, err := client.Get(url)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					hists[r].RecordValue(time.Since(start).Microseconds())
					if res.StatusCode != http.StatusOK {
						t.Errorf("GET %s: %d", url, res.StatusCode)
						return
					}
				}
			}()
		}
		wg.Wait()
		stopSampling()
		ps.wall = time.Since(start)
		ps.cpu = (processCPU() - cpu0).Seconds() / ps.wall.Seconds()
		ps.hub = readHubCounters(t, m).minus(hub0)
		runtime.ReadMemStats(&ms)
		ps.gcs, ps.gcStop = ms.NumGC-gc0, time.Duration(ms.PauseTotalNs-pause0)
		for _, h := range hists[1:] {
			hists[0].Merge(h)
		}
		ps.reads = hists[0]
		return ps
	}

	q := func(h *hdrhistogram.Histogram, p float64) time.Duration {
		return time.Duration(h.ValueAtQuantile(p)) * time.Microsecond
	}
	lat := func(h *hdrhistogram.Histogram) string {
		return fmt.Sprintf("n=%d p50=%v p99=%v p99.9=%v max=%v", h.TotalCount(), q(h, 50), q(h, 99), q(h, 99.9), q(h, 100))
	}
	ratio := func(with, base *hdrhistogram.Histogram) float64 {
		return float64(q(with, 99.9)) / float64(max(1, q(base, 99.9)))
	}
	t.Logf("watchers=%d prefixes=%d (each write reaches %d watchers) writes/s=%d GET/s=%d phase=%v rounds=%d",
		o.watchers, o.groups, o.watchers/o.groups, writesPerS, readers*1_000_000/readEveryUs, o.phase, o.rounds)
	allBase := hdrhistogram.New(1, 10_000_000, 3)
	for r := range o.rounds {
		base := run(o.phase, nil)
		allBase.Merge(base.reads)
		t.Logf("round %d (load %s)", r+1, loadAverage())
		t.Logf("  without: %s; CPU %.2f cores, %d GCs", lat(base.reads), base.cpu, base.gcs)
		for _, v := range variants {
			e.db.Watch = v.hub
			var w *watchersRun
			var err error
			if o.inProcess {
				w, err = startWatchersInProcess(e.srv.URL, o.watchers, o.groups)
			} else {
				w, err = startWatchersProcess(t, e.srv.URL, o.watchers, o.groups)
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // let the setup settle
			stopProfile := startCPUProfile(t, fmt.Sprintf("prefixes%d-round%d-%s", o.groups, r+1, strings.ReplaceAll(v.name, "/", "")))
			var adapting *watch.Budget
			if v.adaptive {
				adapting = v.budget
			}
			with := run(o.phase, adapting)
			stopProfile()
			roundDelays, roundCuts, err := w.stop()
			if err != nil {
				t.Fatal(err)
			}
			v.cuts += roundCuts
			v.delays.Merge(roundDelays)
			v.reads.Merge(with.reads)
			v.samples.merge(with.budget)
			t.Logf("  %s: watchers opened in %v; watcher process CPU %v in all", v.name, w.took.Round(time.Millisecond), w.cpu.Round(time.Millisecond))
			t.Logf("    reads: %s; CPU %.2f cores (server, writer, readers), %d GCs (%v stopped)", lat(with.reads), with.cpu, with.gcs, with.gcStop.Round(time.Microsecond))
			t.Logf("    writer %.0f writes/s; stream writes %.0f/s, %.1f changes per write, %.0f%% of writes waited for the budget (mean %v); delivery delay %s; cut %d",
				float64(with.writes)/with.wall.Seconds(), with.hub.writes/with.wall.Seconds(), with.hub.events/max(1, with.hub.writes),
				100*with.hub.waited/max(1, with.hub.waits), with.hub.meanWait().Round(time.Microsecond), lat(roundDelays), roundCuts)
			if v.adaptive {
				t.Logf("    budget: %.0f raise, %.0f cut, %.0f hold; %s", with.hub.raise, with.hub.cut, with.hub.hold, with.budget)
			}
			v.ratios = append(v.ratios, ratio(with.reads, base.reads))
			t.Logf("    p99.9 ratio with/without: %.2f", ratio(with.reads, base.reads))
		}
	}
	t.Logf("all rounds without: %s", lat(allBase))
	for _, v := range variants {
		t.Logf("all rounds %s: %s", v.name, lat(v.reads))
		t.Logf("  p99.9 ratio with/without: %.2f (target <= 1.5); p99 ratio %.2f",
			ratio(v.reads, allBase), float64(q(v.reads, 99))/float64(max(1, q(allBase, 99))))
		rs := slices.Clone(v.ratios)
		slices.Sort(rs)
		t.Logf("  rounds' p99.9 ratios, sorted: %.2f (median %.2f)", rs, rs[len(rs)/2])
		t.Logf("  delivery delay (write submitted -> watcher read its line): %s; watchers cut: %d", lat(v.delays), v.cuts)
		if v.adaptive {
			t.Logf("  budget: %s", v.samples)
		}
	}
}

// loadVariant is one watch budget TestWatchLoad measures, with a hub of
// its own, and what it measured over every round.
type loadVariant struct {
	name     string
	limits   watch.Limits
	adaptive bool // the budget runs (Budget.Run); otherwise its rate is fixed
	hub      *watch.Hub
	budget   *watch.Budget
	reads    *hdrhistogram.Histogram // GET latency with watchers, µs
	delays   *hdrhistogram.Histogram // delivery delay, µs
	cuts     int64
	ratios   []float64     // each round's read p99.9 ratio with/without
	samples  budgetSamples // while it served watchers, if adaptive
}

func (v *loadVariant) start(t *testing.T, e *env, m *watch.Metrics) {
	v.reads = hdrhistogram.New(1, 10_000_000, 3)
	v.delays = hdrhistogram.New(1, 600_000_000, 3)
	v.budget = watch.NewBudget(v.limits, m)
	if v.adaptive {
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			if err := v.budget.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
		t.Cleanup(func() { cancel(); <-ran })
	}
	withHub(t, e, watch.Config{Budget: v.budget})
	v.hub = e.db.Watch
}

// budgetSamples are an adaptive budget's rate and signal (Budget.Rate,
// Signal), sampled every 100ms.
type budgetSamples struct {
	rates     []float64
	signals   []time.Duration
	baselines []time.Duration
	target    time.Duration
}

// sampleBudget samples b into s until stop is called (nothing if b is nil).
func sampleBudget(b *watch.Budget, s *budgetSamples) (stop func()) {
	if b == nil {
		return func() {}
	}
	s.target = b.Limits().WakeDelayTarget
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				s.rates = append(s.rates, b.Rate())
				s.signals = append(s.signals, b.Signal())
				s.baselines = append(s.baselines, b.Baseline())
			}
		}
	}()
	return func() { close(done); <-ended }
}

func (s *budgetSamples) merge(o budgetSamples) {
	s.rates = append(s.rates, o.rates...)
	s.signals = append(s.signals, o.signals...)
	s.baselines = append(s.baselines, o.baselines...)
	s.target = o.target
}

func (s budgetSamples) String() string {
	if len(s.rates) == 0 {
		return "no samples"
	}
	r, g, bl := slices.Clone(s.rates), slices.Clone(s.signals), slices.Clone(s.baselines)
	slices.Sort(r)
	slices.Sort(g)
	slices.Sort(bl)
	over := 0
	for _, d := range g {
		if d > s.target {
			over++
		}
	}
	at := func(n int, q float64) int { return min(n-1, int(q*float64(n))) }
	return fmt.Sprintf("rate p10/p50/p90 %.0f/%.0f/%.0f per s; wake delay p90 per 100ms p50/p90 %v/%v, over the %v target in %.0f%% of samples; baseline p10/p50/p90 %v/%v/%v",
		r[at(len(r), 0.1)], r[at(len(r), 0.5)], r[at(len(r), 0.9)], g[at(len(g), 0.5)].Round(time.Microsecond), g[at(len(g), 0.9)].Round(time.Microsecond),
		s.target, 100*float64(over)/float64(len(g)),
		bl[at(len(bl), 0.1)].Round(time.Microsecond), bl[at(len(bl), 0.5)].Round(time.Microsecond), bl[at(len(bl), 0.9)].Round(time.Microsecond))
}

// watchersRun is a set of open watch streams.
type watchersRun struct {
	took time.Duration // to open them all
	cpu  time.Duration // CPU time of the watcher process, set by stop (0 in process)
	stop func() (delays *hdrhistogram.Histogram, cuts int64, err error)
}

// startWatchersInProcess opens the watchers of TestWatchLoad in this process.
func startWatchersInProcess(url string, n, groups int) (*watchersRun, error) {
	delays := hdrhistogram.New(1, 600_000_000, 3)
	var cuts atomic.Int64
	start := time.Now()
	stop, err := openWatchers(url, n, groups, delays, &cuts)
	if err != nil {
		return nil, err
	}
	return &watchersRun{took: time.Since(start), stop: func() (*hdrhistogram.Histogram, int64, error) {
		stop()
		return delays, cuts.Load(), nil
	}}, nil
}

// startWatchersProcess opens the watchers of TestWatchLoad in a child
// process running TestWatchLoadClient: it prints "ready" once every stream
// has read its first line; closing its stdin stops it, and it prints
// "result <cuts> <encoded delay histogram>".
func startWatchersProcess(t testing.TB, url string, n, groups int) (*watchersRun, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchLoadClient$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), "QS_WATCH_BENCH_CLIENT="+url,
		fmt.Sprintf("QS_WATCH_BENCH_CLIENT_WATCHERS=%d", n), fmt.Sprintf("QS_WATCH_BENCH_CLIENT_GROUPS=%d", groups))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 64) // the child prints a few lines only
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var waited atomic.Bool
	kill := func() {
		if waited.CompareAndSwap(false, true) {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(kill)
	// wait reads lines until one starts with prefix.
	wait := func(prefix string, d time.Duration) (string, error) {
		timeout := time.After(d)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return "", fmt.Errorf("watcher process ended before %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return l, nil
				}
			case <-timeout:
				kill()
				return "", fmt.Errorf("no %q from the watcher process in %v", prefix, d)
			}
		}
	}
	if _, err := wait("ready", 2*time.Minute); err != nil {
		return nil, err
	}
	r := &watchersRun{took: time.Since(start)}
	r.stop = func() (*hdrhistogram.Histogram, int64, error) {
		stdin.Close()
		l, err := wait("result ", time.Minute)
		if err != nil {
			return nil, 0, err
		}
		f := strings.Fields(l)
		if len(f) != 4 {
			return nil, 0, fmt.Errorf("watcher process result %q", l)
		}
		cuts, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, 0, err
		}
		cpu, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return nil, 0, err
		}
		r.cpu = time.Duration(cpu)
		h, err := hdrhistogram.Decode([]byte(f[3]))
		if err != nil {
			return nil, 0, err
		}
		for range lines { // until the child closes its stdout
		}
		if waited.CompareAndSwap(false, true) {
			if err := cmd.Wait(); err != nil {
				return nil, 0, fmt.Errorf("watcher process: %w", err)
			}
		}
		return h, cuts, nil
	}
	return r, nil
}

// TestWatchLoadClient is the watcher process of TestWatchLoad; it runs
// only when started by it.
func TestWatchLoadClient(t *testing.T) {
	url := os.Getenv("QS_WATCH_BENCH_CLIENT")
	if url == "" {
		t.Skip("the watcher process of TestWatchLoad")
	}
	n := envInt(t, "QS_WATCH_BENCH_CLIENT_WATCHERS", 1)
	groups := envInt(t, "QS_WATCH_BENCH_CLIENT_GROUPS", 1)
	delays := hdrhistogram.New(1, 600_000_000, 3)
	var cuts atomic.Int64
	stop, err := openWatchers(url, n, groups, delays, &cuts)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	stop()
	enc, err := delays.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("result %d %d %s\n", cuts.Load(), processCPU(), enc)
}

// openWatchers opens n watch streams of prefixes cfg/<i%groups>/ on the
// server at url, 16 at a time, and returns once each has read its first
// line. Each records into delays the delay (µs) from a change's submit
// time (its value, Unix nanoseconds) to reading its line, and counts an
// error line in cuts. stop closes them all and waits for them.
func openWatchers(url string, n, groups int, delays *hdrhistogram.Histogram, cuts *atomic.Int64) (stop func(), err error) {
	var mu sync.Mutex
	wtr := &http.Transport{DisableCompression: true}
	wctx, wcancel := context.WithCancel(context.Background())
	var wwg sync.WaitGroup
	stop = func() {
		wcancel()
		wwg.Wait()
		wtr.CloseIdleConnections()
	}
	ready := make(chan struct{}, n)
	failed := make(chan error, n)
	opening := make(chan struct{}, 16) // connections being opened at once
	for i := range n {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			opening <- struct{}{}
			req, _ := http.NewRequestWithContext(wctx, "GET", fmt.Sprintf("%s/v1/db/watch?prefix=cfg/%d/", url, i%groups), nil)
			res, err := wtr.RoundTrip(req)
			<-opening
			if err == nil && res.StatusCode != http.StatusOK {
				res.Body.Close()
				err = fmt.Errorf("status %d", res.StatusCode)
			}
			if err != nil {
				failed <- fmt.Errorf("watcher %d: %w", i, err)
				return
			}
			defer res.Body.Close()
			var local []int64
			defer func() {
				mu.Lock()
				for _, d := range local {
					delays.RecordValue(d)
				}
				mu.Unlock()
			}()
			br := bufio.NewReaderSize(res.Body, 16<<10)
			first := true
			var dec [64]byte
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				now := time.Now().UnixNano()
				if first {
					ready <- struct{}{}
					first = false
				}
				if bytes.HasPrefix(line, []byte(`{"error"`)) {
					cuts.Add(1)
					return
				}
				j := bytes.Index(line, []byte(`"value":"`))
				if j < 0 {
					continue
				}
				v := line[j+9:]
				if k := bytes.IndexByte(v, '"'); k >= 0 {
					v = v[:k]
				}
				n, err := base64.StdEncoding.Decode(dec[:], v)
				if err != nil {
					continue
				}
				if ts, err := strconv.ParseInt(string(dec[:n]), 10, 64); err == nil {
					local = append(local, max(1, (now-ts)/1000))
				}
			}
		}()
	}
	for range n {
		select {
		case <-ready:
		case err := <-failed:
			stop()
			return nil, err
		case <-time.After(60 * time.Second):
			stop()
			return nil, errors.New("watchers not ready in 60s")
		}
	}
	return stop, nil
}

// startCPUProfile writes a CPU profile of a with-watchers phase to
// $QS_WATCH_BENCH_PROFILE_DIR/<name>.prof when that is set.
func startCPUProfile(t testing.TB, name string) (stop func()) {
	dir := os.Getenv("QS_WATCH_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".prof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// hubCounters are the watch metrics the benchmark reports.
type hubCounters struct {
	writes, events      float64 // qs_watch_writes_total, qs_watch_events_sent_total
	waits, waited, wait float64 // budget waits: all, those above 10µs, seconds in all
	raise, cut, hold    float64 // the budget's decisions (forgiven and no-signal count as hold)
}

func (c hubCounters) minus(o hubCounters) hubCounters {
	return hubCounters{c.writes - o.writes, c.events - o.events, c.waits - o.waits, c.waited - o.waited, c.wait - o.wait,
		c.raise - o.raise, c.cut - o.cut, c.hold - o.hold}
}

func (c hubCounters) meanWait() time.Duration {
	return time.Duration(c.wait / max(1, c.waited) * 1e9)
}

func readHubCounters(t testing.TB, m *watch.Metrics) hubCounters {
	r := prometheus.NewRegistry()
	r.MustRegister(m)
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var c hubCounters
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "qs_watch_rate_decisions_total":
				v := m.GetCounter().GetValue()
				switch m.GetLabel()[0].GetValue() {
				case "raise":
					c.raise += v
				case "cut":
					c.cut += v
				default:
					c.hold += v
				}
			case "qs_watch_writes_total":
				c.writes += m.GetCounter().GetValue()
			case "qs_watch_events_sent_total":
				c.events += m.GetCounter().GetValue()
			case "qs_watch_turn_wait_seconds":
				h := m.GetHistogram()
				c.waits += float64(h.GetSampleCount())
				c.wait += h.GetSampleSum()
				if b := h.GetBucket(); len(b) > 0 { // waits of zero fall in the first bucket (10µs)
					c.waited += float64(h.GetSampleCount() - b[0].GetCumulativeCount())
				}
			}
		}
	}
	return c
}

// processCPU is the CPU time (user and system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
