package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/ctrim"
	"github.com/quicksilver-kv/qs/internal/gcfloor"
	qsmetrics "github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestChurnDisk is the churn benchmark (QS_BENCH=1): a root at default
// settings (1 GiB log, 1 GiB and 2 h of history, the shipped GC policy),
// 3 writers overwriting and deleting 20k keys as fast as commits allow,
// 20% deletes, set values of 10–1000 bytes except 5% of 1 KiB–200 KB.
// It reports the disk by part (log segments, of them retired blocks;
// Pebble tables, blob files and the rest; history's logical bytes; the
// ballast) against the live value bytes, and samples the process's RSS,
// Go heap and Pebble's block cache and memtables every QS_CHURN_SAMPLE
// (default 10 s).
//
// QS_CHURN_PROFILE_DIR, if set, receives a heap profile (heap-NNNN.pprof,
// seconds since the start, taken after a collection) at every sample, to
// compare with `go tool pprof -base`.
//
// QS_CHURN_DURATION (default 4m) sets the run's length; QS_CHURN_RATE
// caps the writes per second of all writers together (default: no cap);
// QS_CHURN_CAP_BYTES sets both the log's and the history's byte caps
// (default 1 GiB each), so that a shorter or slower run reaches them.
// QS_CHURN_TRIM=0 leaves the C allocator untrimmed (internal/ctrim; builds
// with cgo), to compare.
func TestChurnDisk(t *testing.T) {
	if os.Getenv("QS_BENCH") != "1" {
		t.Skip("a benchmark: set QS_BENCH=1")
	}
	dur := envDuration(t, "QS_CHURN_DURATION", 4*time.Minute)
	every := envDuration(t, "QS_CHURN_SAMPLE", 10*time.Second)
	rate := 0
	if v := os.Getenv("QS_CHURN_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("QS_CHURN_RATE=%q: want a positive integer", v)
		}
		rate = n
	}
	o := Options{Name: "churn", Logger: quietLogger()}
	if v := os.Getenv("QS_CHURN_CAP_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("QS_CHURN_CAP_BYTES=%q: want a positive integer", v)
		}
		o.Retention.MaxBytes, o.History.MaxBytes = n, n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go gcfloor.Run(ctx, GoHeapEngineBytes)
	if os.Getenv("QS_CHURN_TRIM") != "0" {
		go ctrim.Run(ctx) // as qs serve does
	}

	dir := t.TempDir()
	o.Dir = dir
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const keys, writers = 20000, 3
	pool := make([]byte, 8<<20)
	rand.Read(pool)
	var tick <-chan time.Time
	if rate > 0 {
		tk := time.NewTicker(time.Second / time.Duration(rate))
		defer tk.Stop()
		tick = tk.C
	}
	var writes, deletes, failed sync.Map
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			var n, d, f int
			for time.Now().Before(stop) {
				if tick != nil {
					<-tick
				}
				key := []byte(fmt.Sprintf("churn/%05d", rng.IntN(keys)))
				op := wal.Op{Type: wal.OpDelete, Key: key}
				if rng.IntN(5) > 0 {
					size := 10 + rng.IntN(991)
					if rng.IntN(20) == 0 {
						size = 1024 + rng.IntN(200_000-1024+1)
					}
					off := rng.IntN(len(pool) - size)
					op = wal.Op{Type: wal.OpSet, Key: key, Value: pool[off : off+size]}
				} else {
					d++
				}
				if _, err := s.Write(ctx, Batch{Ops: []wal.Op{op}}); err != nil {
					f++
					if f == 1 {
						t.Errorf("write: %v", err)
					}
					continue
				}
				n++
			}
			writes.Store(w, n)
			deletes.Store(w, d)
			failed.Store(w, f)
		}()
	}
	start := time.Now()
	samples := sampleMemory(t, s, start, stop, every)
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	writes.Range(func(_, v any) bool { total += v.(int); return true })
	t.Logf("%d writes in %s (%.0f/s)", total, elapsed.Round(time.Second), float64(total)/elapsed.Seconds())
	t.Logf("caps: log %d bytes, history %d bytes", s.opts.Retention.MaxBytes, s.opts.History.MaxBytes)
	reportChurnDisk(t, s, dir)
	reportMemory(t, samples)
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// churnDisk is the disk of a store by part.
type churnDisk struct {
	segments, spare, sst, blob, wal, other, ballast int64
}

func measureDisk(t *testing.T, dir string) churnDisk {
	var d churnDisk
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		name := fi.Name()
		switch {
		case name == spareName:
			d.spare += fi.Size()
		case strings.HasPrefix(name, "qslog-"):
			d.segments += fi.Size()
		case strings.HasSuffix(name, ".log"):
			d.wal += fi.Size()
		case strings.HasSuffix(name, ".sst"):
			d.sst += fi.Size()
		case strings.HasSuffix(name, ".blob"):
			d.blob += fi.Size()
		case name == "BALLAST":
			d.ballast += fi.Size()
		default:
			d.other += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func reportChurnDisk(t *testing.T, s *Store, dir string) {
	d := measureDisk(t, dir)
	h, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	lb, err := s.getMeta(metaLog)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := decodeLogRecord(lb)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := s.loadRetiredTotals()
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.getMeta(metaStats)
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeStats(b)
	if err != nil {
		t.Fatal(err)
	}
	uses, err := segUses(s.db)
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, u := range uses {
		used += u.bytes
	}
	snap := s.db.NewSnapshot()
	logSeg, err := firstLogSegment(snap)
	snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	var sp segmentSpace
	s.segs.mu.Lock()
	cur := s.segs.curSeq
	s.segs.mu.Unlock()
	for seq := range *s.segs.files.Load() {
		sp.add(seq, s.segs.fileSize(seq), uses[seq].bytes, cur, logSeg)
	}
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	all := d.segments + d.spare + d.sst + d.blob + d.wal + d.other + d.ballast
	t.Logf("live: %d keys, %s of values", st.keys, mb(st.valueBytes))
	t.Logf("log retained: %s from entry %d to %d; retired blocks: %d, %s", mb(lr.bytes), lr.first, s.AppliedIndex(), rt.blocks, mb(rt.bytes))
	t.Logf("history: %d versions, %s logical", h.Entries, mb(h.Bytes))
	t.Logf("disk: log segments %s (blocks in them %s, free or dead space %s), spare segment %s, pebble tables %s, blob files %s, WAL %s, other %s, ballast %s; total %s",
		mb(d.segments), mb(used), mb(d.segments-used), mb(d.spare), mb(d.sst), mb(d.blob), mb(d.wal), mb(d.other), mb(d.ballast), mb(all))
	t.Logf("free or dead space: %s in the open segment, %s in %d segments of the log, %s in %d segments of retired blocks only; segments of %s",
		mb(sp.open), mb(sp.log), sp.logSegs, mb(sp.retired), sp.retiredSegs, mb(s.segs.size))
	var parts []string
	for _, r := range []struct {
		name   string
		prefix []byte
	}{
		{"values", []byte{prefixData}},
		{"chunks", []byte{prefixChunk}},
		{"log", []byte{prefixLog}},
		{"history versions", []byte{prefixHistory, histVersionTag}},
		{"history by time", []byte{prefixHistory, histTimeTag}},
	} {
		n, err := s.db.EstimateDiskUsage(r.prefix, prefixEnd(r.prefix))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, r.name+" "+mb(int64(n)))
	}
	t.Logf("pebble by keys (tables and blob files): %s", strings.Join(parts, ", "))
	if st.valueBytes > 0 {
		t.Logf("disk per live byte: %.1f (without the ballast %.1f; beyond log retention and ballast %.2f)",
			float64(all)/float64(st.valueBytes), float64(all-d.ballast)/float64(st.valueBytes),
			float64(all-d.ballast-lr.bytes)/float64(st.valueBytes))
		bound := lr.bytes + 3*st.valueBytes/2 + d.ballast
		t.Logf("log retention + 1.5 × live + ballast = %s: disk is %.2f of it", mb(bound), float64(all)/float64(bound))
	}
}

// memSample is one sample of the process's memory.
type memSample struct {
	at                       time.Duration
	rss, heap, total         int64
	blockCache, memtables    int64
	heapGoal, released, idle int64
	live                     int64 // the heap marked live by the last collection
	goroutines               int
	load                     string // the 1-minute load average
}

// sampleMemory samples memory every `every` until stop.
func sampleMemory(t *testing.T, s *Store, start, stop time.Time, every time.Duration) []memSample {
	names := []string{"/memory/classes/heap/objects:bytes", "/memory/classes/total:bytes",
		"/gc/heap/goal:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes",
		"/gc/heap/live:bytes"}
	ms := make([]metrics.Sample, len(names))
	for i, n := range names {
		ms[i].Name = n
	}
	profDir := os.Getenv("QS_CHURN_PROFILE_DIR")
	var out []memSample
	for time.Now().Before(stop) {
		time.Sleep(min(every, time.Until(stop)))
		metrics.Read(ms)
		pm := s.db.Metrics()
		m := memSample{
			at: time.Since(start), rss: readRSS(t),
			heap: int64(ms[0].Value.Uint64()), total: int64(ms[1].Value.Uint64()),
			heapGoal: int64(ms[2].Value.Uint64()), released: int64(ms[3].Value.Uint64()),
			idle: int64(ms[4].Value.Uint64()), live: int64(ms[5].Value.Uint64()),
			blockCache: pm.BlockCache.Size, memtables: int64(pm.MemTable.Size),
		}
		m.goroutines, m.load = runtime.NumGoroutine(), readLoad()
		if profDir != "" {
			writeHeapProfile(t, filepath.Join(profDir, fmt.Sprintf("heap-%04d.pprof", int(m.at.Seconds()))))
		}
		t.Logf("mem t=%s load=%s goroutines=%d rss=%.1fMB heap_live=%.1fMB heap_objects=%.1fMB heap_goal=%.1fMB go_total=%.1fMB heap_free=%.1fMB heap_released=%.1fMB block_cache=%.1fMB memtables=%.1fMB",
			m.at.Round(time.Second), m.load, m.goroutines, mbf(m.rss), mbf(m.live), mbf(m.heap), mbf(m.heapGoal), mbf(m.total), mbf(m.idle), mbf(m.released), mbf(m.blockCache), mbf(m.memtables))
		out = append(out, m)
	}
	return out
}

// writeHeapProfile writes the heap profile as of a fresh collection.
func writeHeapProfile(t *testing.T, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

func mbf(n int64) float64 { return float64(n) / 1e6 }

// readLoad returns the 1-minute load average (Linux), or "?".
func readLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// readRSS returns the resident set of this process (Linux), or 0.
func readRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", l, err)
			}
			return n << 10
		}
	}
	return 0
}

// reportMemory reports RSS, the live Go heap and the heap goal after
// warm-up (the first fifth of the run): first, last, min and max, and the
// spread of each (max − min, in % of min); and the load average's range.
func reportMemory(t *testing.T, samples []memSample) {
	if len(samples) == 0 {
		return
	}
	warm := samples[len(samples)-1].at / 5
	var after []memSample
	for _, m := range samples {
		if m.at >= warm {
			after = append(after, m)
		}
	}
	if len(after) == 0 {
		return
	}
	t.Logf("after %s of warm-up (%d samples):", warm.Round(time.Second), len(after))
	for _, f := range []struct {
		name string
		of   func(memSample) int64
	}{
		{"rss", func(m memSample) int64 { return m.rss }},
		{"heap live", func(m memSample) int64 { return m.live }},
		{"heap goal", func(m memSample) int64 { return m.heapGoal }},
	} {
		lo, hi := after[0], after[0]
		for _, m := range after {
			if f.of(m) < f.of(lo) {
				lo = m
			}
			if f.of(m) > f.of(hi) {
				hi = m
			}
		}
		if f.of(lo) <= 0 {
			continue
		}
		t.Logf("  %s: first %.1f MB, last %.1f MB, min %.1f MB at %s, max %.1f MB at %s, spread %.1f%% of min",
			f.name, mbf(f.of(after[0])), mbf(f.of(after[len(after)-1])), mbf(f.of(lo)), lo.at.Round(time.Second),
			mbf(f.of(hi)), hi.at.Round(time.Second), 100*float64(f.of(hi)-f.of(lo))/float64(f.of(lo)))
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, m := range after {
		if l, err := strconv.ParseFloat(m.load, 64); err == nil {
			lo, hi = min(lo, l), max(hi, l)
		}
	}
	t.Logf("  load average (1 min) at the samples: %.1f–%.1f", lo, hi)
	if ctrim.Available() {
		t.Logf("  C allocator trims: %s", allocatorTrims(t))
	}
}

// allocatorTrims reports the process's qs_allocator_* metrics
// (internal/ctrim).
func allocatorTrims(t *testing.T) string {
	mfs, err := qsmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, mf := range mfs {
		if name := mf.GetName(); strings.HasPrefix(name, "qs_allocator_") && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			parts = append(parts, fmt.Sprintf("%s %g", strings.TrimPrefix(name, "qs_allocator_"), v))
		}
	}
	return strings.Join(parts, ", ")
}

// segmentSpace sorts the segments' free or dead bytes by where they are:
// the open segment's unwritten tail, segments holding log blocks, and
// segments holding only retired blocks.
type segmentSpace struct {
	open, log, retired   int64
	logSegs, retiredSegs int
}

func (sp *segmentSpace) add(seq uint64, size, used int64, cur, firstLog uint64) {
	free := size - used
	switch {
	case seq == cur:
		sp.open += free
	case seq >= firstLog:
		sp.log += free
		sp.logSegs++
	default:
		sp.retired += free
		sp.retiredSegs++
	}
}
