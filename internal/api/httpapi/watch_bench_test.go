package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// TestWatchLoad measures what watchers cost readers on one node: GET
// latency with no watchers, then with QS_WATCH_BENCH_WATCHERS watch
// streams open (default 200), under the same writer (~100 writes/s) and
// reader load (2,000 GET/s from 4 clients), plus the delay from a write
// being submitted to a watcher reading its change. Watchers watch
// QS_WATCH_BENCH_GROUPS distinct prefixes (default 50); the writer cycles
// through them, so each write reaches watchers/groups streams (groups=1:
// every write reaches every watcher). Phases last QS_WATCH_BENCH_SECONDS
// (default 10). Client and server share the process and its CPUs. It runs
// only with QS_WATCH_BENCH=1:
//
//	QS_WATCH_BENCH=1 QS_WATCH_BENCH_WATCHERS=5000 go test -run TestWatchLoad -v ./internal/api/httpapi
func TestWatchLoad(t *testing.T) {
	if os.Getenv("QS_WATCH_BENCH") == "" {
		t.Skip("set QS_WATCH_BENCH=1 to run the watch load benchmark")
	}
	watchers := envInt(t, "QS_WATCH_BENCH_WATCHERS", 200)
	groups := envInt(t, "QS_WATCH_BENCH_GROUPS", 50)
	phase := time.Duration(envInt(t, "QS_WATCH_BENCH_SECONDS", 10)) * time.Second
	const (
		keys        = 1000
		writesPerS  = 100
		readers     = 4
		readEveryUs = 2000 // per reader: 2,000 GET/s in all
	)

	e := newEnv(t, Config{}, store.Options{})
	withHub(t, e, watch.Config{MaxWatchers: watchers + 10})
	for i := range keys {
		if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{setOp(fmt.Sprintf("cfg/%d/%d", i%groups, i), "initial value of some config key")}}); err != nil {
			t.Fatal(err)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: readers + 1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// run drives the writer and the readers for d and returns the read
	// latency histogram (µs).
	run := func(d time.Duration) *hdrhistogram.Histogram {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // writer; the value is its submit time
			defer wg.Done()
			tick := time.NewTicker(time.Second / writesPerS)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				k := fmt.Sprintf("cfg/%d/%d", i%groups, rand.IntN(keys))
				v := strconv.FormatInt(time.Now().UnixNano(), 10)
				if _, err := e.st.Write(context.Background(), store.Batch{Ops: []wal.Op{setOp(k, v)}}); err != nil {
					t.Error(err)
					return
				}
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
					url := fmt.Sprintf("%s/v1/db/keys/cfg/%d/%d", e.srv.URL, i%groups, i)
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
		for _, h := range hists[1:] {
			hists[0].Merge(h)
		}
		return hists[0]
	}

	base := run(phase)

	// Open the watchers; each keeps its delivery delays (µs) locally.
	var (
		mu     sync.Mutex
		delays = hdrhistogram.New(1, 60_000_000, 3)
		cuts   atomic.Int64
	)
	wtr := &http.Transport{DisableCompression: true}
	defer wtr.CloseIdleConnections()
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var wwg sync.WaitGroup
	ready := make(chan struct{}, watchers)
	openStart := time.Now()
	for i := range watchers {
		req, _ := http.NewRequestWithContext(wctx, "GET", fmt.Sprintf("%s/v1/db/watch?prefix=cfg/%d/", e.srv.URL, i%groups), nil)
		res, err := wtr.RoundTrip(req)
		if err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("watcher %d: status %d", i, res.StatusCode)
		}
		wwg.Add(1)
		go func() {
			defer wwg.Done()
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
	for range watchers {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatal("watchers not ready in 60s")
		}
	}
	opened := time.Since(openStart)
	with := run(phase)
	wcancel()
	wwg.Wait()

	q := func(h *hdrhistogram.Histogram, p float64) time.Duration {
		return time.Duration(h.ValueAtQuantile(p)) * time.Microsecond
	}
	t.Logf("watchers=%d groups=%d (each write reaches %d watchers) writes/s=%d GET/s=%d phase=%v; watchers opened in %v",
		watchers, groups, watchers/groups, writesPerS, readers*1_000_000/readEveryUs, phase, opened.Round(time.Millisecond))
	t.Logf("GET latency without watchers: n=%d p50=%v p99=%v p99.9=%v max=%v", base.TotalCount(), q(base, 50), q(base, 99), q(base, 99.9), q(base, 100))
	t.Logf("GET latency with watchers:    n=%d p50=%v p99=%v p99.9=%v max=%v", with.TotalCount(), q(with, 50), q(with, 99), q(with, 99.9), q(with, 100))
	t.Logf("p99.9 ratio with/without: %.2f (target <= 1.5)", float64(q(with, 99.9))/float64(max(1, q(base, 99.9))))
	t.Logf("delivery delay (write submitted -> watcher read its line): n=%d p50=%v p99=%v p99.9=%v max=%v; watchers cut: %d",
		delays.TotalCount(), q(delays, 50), q(delays, 99), q(delays, 99.9), q(delays, 100), cuts.Load())
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
