package watch

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// benchHub returns a hub (not running: the benchmark calls fanOut) with
// one live subscriber on each of prefixes, and the entries to fan out:
// one change each, cycling through the prefixes.
func benchHub(b *testing.B, prefixes, subsPerPrefix int) (*Hub, []*Sub, func(i int) []wal.Entry) {
	st := openStore(b, store.Options{})
	h := NewHub(st, Config{Budget: NewBudget(Limits{MaxWatchers: prefixes*subsPerPrefix + 1, WriteRate: 1e12, WriteBurst: 1 << 30}, nil)}, nil)
	var subs []*Sub
	for p := range prefixes {
		for range subsPerPrefix {
			s, err := h.Subscribe([]byte(fmt.Sprintf("cfg/%d/", p)), st.AppliedIndex())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			subs = append(subs, s)
		}
	}
	next := st.AppliedIndex() + 1
	entry := func(i int) []wal.Entry {
		e := wal.Entry{Index: next, Kind: wal.KindData, Time: time.Now().UnixNano(),
			Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(fmt.Sprintf("cfg/%d/key%d", i%prefixes, i)), Value: []byte("a value of some config key")}}}
		next++
		return []wal.Entry{e}
	}
	return h, subs, entry
}

// BenchmarkFanOut: the hub's work for one entry (one change), by number
// of watched prefixes; it does not depend on the number of watchers.
func BenchmarkFanOut(b *testing.B) {
	for _, prefixes := range []int{1, 50, 10_000} {
		b.Run(fmt.Sprintf("prefixes=%d", prefixes), func(b *testing.B) {
			h, _, entry := benchHub(b, prefixes, 1)
			entries := make([][]wal.Entry, b.N)
			for i := range entries {
				entries[i] = entry(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				h.fanOut(entries[i])
			}
		})
	}
}

// BenchmarkDeliver: a subscriber's work for one change (Next, the shared
// encoding, Delivered; no socket), per change and watcher, with 100
// watchers of one prefix: the cost that is paid per watcher.
func BenchmarkDeliver(b *testing.B) {
	const watchers = 100
	h, subs, entry := benchHub(b, 1, watchers)
	enc := func(dst []byte, evs []Event) []byte {
		for _, e := range evs {
			dst = append(dst, e.Key...)
			dst = append(dst, e.Value...)
		}
		return dst
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += watchers {
		h.fanOut(entry(i))
		for _, s := range subs {
			u, err := s.Next(ctx, 0)
			if err != nil || len(u.Batches) != 1 {
				b.Fatalf("%+v %v", u, err)
			}
			u.Batches[0].Encoded(enc)
			s.Delivered(u, time.Now())
		}
	}
}

// BenchmarkTurns: the cost of taking and giving back a write turn when
// the budget is saturated (200 goroutines for 1 turn at a time, the rate
// binding), per turn: wall time, and the process's CPU time (cpu-ns/op).
func BenchmarkTurns(b *testing.B) {
	const waiters = 200
	const rate = 20_000
	ts := newTurns(1, rate, 32, NewMetrics())
	ctx := context.Background()
	done := make(chan struct{})
	per := b.N/waiters + 1
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var t *time.Timer
			for range per {
				if err := ts.acquire(ctx, done, &t); err != nil {
					b.Error(err)
					return
				}
				ts.release()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(per*waiters), "cpu-ns/op")
	b.ReportMetric(float64(per*waiters)/b.Elapsed().Seconds(), "turns/s")
}

// cpuTime is the process's CPU time (user and system) so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBudgetProbe: what the adaptive budget costs, as CPU time of
// the process per second of wall time (cpu-µs/s, over one second per
// iteration), with one watcher: quiet (no writes: Run neither probes nor
// wakes more than once per 100ms), and with about 2,800 writes/s (3
// turns taken per tick of a 1ms ticker: busy) without and with Run
// probing every 2ms. On an idle process each probe costs a thread wake-up; on a
// busy one, less.
func BenchmarkBudgetProbe(b *testing.B) {
	for _, c := range []struct {
		name        string
		run, writes bool
	}{{"quiet", true, false}, {"writes", false, true}, {"writes+probe", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			bu := NewBudget(Limits{}, nil)
			if err := bu.admit(); err != nil {
				b.Fatal(err)
			}
			defer bu.leave()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			if c.run {
				wg.Add(1)
				go func() {
					defer wg.Done()
					bu.Run(ctx)
				}()
			}
			var writes atomic.Int64
			if c.writes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(time.Millisecond)
					defer tick.Stop()
					var tm *time.Timer
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						for range 3 {
							if bu.turns.acquire(ctx, nil, &tm) != nil {
								return
							}
							bu.turns.release()
							writes.Add(1)
						}
					}
				}()
			}
			probes := func() float64 {
				m := &dto.Metric{}
				bu.metrics.wakeDelay.Write(m)
				return float64(m.GetHistogram().GetSampleCount())
			}
			time.Sleep(300 * time.Millisecond)
			b.ResetTimer()
			cpu0, writes0, probes0, start := cpuTime(), writes.Load(), probes(), time.Now()
			for range b.N {
				time.Sleep(time.Second)
			}
			b.StopTimer()
			wall := time.Since(start).Seconds()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/wall, "cpu-µs/s")
			b.ReportMetric(float64(writes.Load()-writes0)/wall, "writes/s")
			b.ReportMetric((probes()-probes0)/wall, "probes/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkHubIdle: what the hub costs a store taking durable 40 kB writes
// (2 writers, incompressible values: the write load of the readlat
// benchmark) while nobody watches, as process CPU per write (cpu-µs/op):
// no hub, the hub reading every entry back (readIdle, as before it
// skipped), and the hub skipping the log while no subscriber is live.
// Only same-run differences mean something.
//
//	go test -run XXX -bench HubIdle -benchtime 3000x ./internal/watch
func BenchmarkHubIdle(b *testing.B) {
	for _, c := range []struct {
		name          string
		hub, readIdle bool
	}{{"no-hub", false, false}, {"hub-reading", true, true}, {"hub-idle", true, false}} {
		b.Run(c.name, func(b *testing.B) {
			st := openStore(b, store.Options{Compression: wal.CompressZstd})
			var h *Hub
			read := func() float64 { return 0 }
			if c.hub {
				h = NewHub(st, Config{}, nil)
				h.readIdle = c.readIdle
				read = func() float64 {
					m := &dto.Metric{}
					h.read.Write(m)
					return m.GetCounter().GetValue()
				}
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan struct{})
				go func() { defer close(ran); h.Run(ctx) }()
				defer func() { cancel(); <-ran }()
			}
			const size = 40 << 10
			pool := make([]byte, 8<<20)
			rand.Read(pool)
			var n atomic.Int64
			b.SetBytes(size)
			b.ResetTimer()
			cpu0, read0 := cpuTime(), read()
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := n.Add(1)
						if i > int64(b.N) {
							return
						}
						off := int(i) * (size + 1) % (len(pool) - size)
						op := wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "w%d-%d", w, i), Value: pool[off : off+size]}
						if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{op}}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if h != nil { // the hub's work for the last writes counts too
				for p, _ := h.Position(); p < st.AppliedIndex(); p, _ = h.Position() {
					time.Sleep(100 * time.Microsecond)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric((read()-read0)/float64(b.N), "read-entries/op")
		})
	}
}
