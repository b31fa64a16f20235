//go:build cgo

package ctrim

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A C heap with most of its blocks freed between the ones still in use,
// as the engine's block cache leaves it: the freed pages stay resident
// until a trim gives them back.
func TestTrimReleasesFreedBlocks(t *testing.T) {
	if !Available() {
		t.Skip("this C library has no malloc_trim (not glibc): nothing to trim")
	}
	if _, ok := residentBytes(); !ok {
		t.Skip("no /proc/self/stat to read the resident memory from")
	}
	// One OS thread for the C calls, so they use one arena.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	Trim()                                   // a clean start
	const n, size, keep = 2048, 32 << 10, 16 // 64 MiB, below glibc's mmap threshold
	b := allocBlocks(n, size)
	defer b.free()
	before, _ := residentBytes()
	b.freeMost(keep)
	held, _ := residentBytes()
	freed := int64(n-n/keep-1) * size
	if before-held > freed/2 {
		t.Skipf("freeing gave back %d of %d bytes without a trim: this allocator does not hold freed pages", before-held, freed)
	}
	trims0, released0 := testutil.ToFloat64(trims), testutil.ToFloat64(released)
	got := Trim()
	after, _ := residentBytes()
	if held-after < freed/2 {
		t.Fatalf("resident memory %d → %d after a trim, want at least %d of the %d freed bytes back", held, after, freed/2, freed)
	}
	if got < freed/2 {
		t.Errorf("Trim reported %d bytes released, want at least %d", got, freed/2)
	}
	if d := testutil.ToFloat64(trims) - trims0; d != 1 {
		t.Errorf("trims_total rose by %v, want 1", d)
	}
	if d := testutil.ToFloat64(released) - released0; d != float64(got) {
		t.Errorf("trim_released_bytes_total rose by %v, want %d", d, got)
	}
}

// A large block (a memtable) freed after another was freed goes back to
// the system at once, as the first did, instead of staying in an arena.
// Without keepLargeBlocksMapped the first free raises glibc's mmap
// threshold and the second block stays resident. It runs in a fresh
// process (this test binary again): the threshold is process-wide, and
// an arena with a large free chunk left by another test would serve the
// block whatever the threshold.
func TestLargeBlocksStayMapped(t *testing.T) {
	if !Available() {
		t.Skip("this C library has no malloc_trim (not glibc)")
	}
	if _, ok := residentBytes(); !ok {
		t.Skip("no /proc/self/stat to read the resident memory from")
	}
	if os.Getenv(freshProcessEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestLargeBlocksStayMapped$", "-test.v")
		cmd.Env = append(os.Environ(), freshProcessEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestLargeBlocksStayMapped")) {
			t.Fatalf("in a fresh process: %v\n%s", err, out)
		}
		return
	}
	keepLargeBlocksMapped()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const size = 8 << 20 // the engine's memtable
	large, pin := largeAfterLarge(size)
	defer cfree(pin)
	before, _ := residentBytes()
	cfree(large)
	after, _ := residentBytes()
	if before-after < size/2 {
		t.Fatalf("resident memory %d → %d after freeing a block of %d bytes, want it back at once", before, after, size)
	}
}

// freshProcessEnv marks the test binary run again by a test that needs a
// process of its own.
const freshProcessEnv = "QS_CTRIM_FRESH_PROCESS"

// BenchmarkTrim is a trim of a C heap holding 256 MiB in 32 KiB blocks,
// half of them just freed and allocated again (a block cache of the
// default size refilling, from whichever threads the goroutine ran on):
// the time the trim takes and the resident memory it gives back.
// BenchmarkTrim/idle trims a heap that has nothing to give back.
func BenchmarkTrim(b *testing.B) {
	if !Available() {
		b.Skip("this C library has no malloc_trim")
	}
	const n, size = 8192, 32 << 10
	blocks := allocBlocks(n, size)
	defer blocks.free()
	b.Run("churned", func(b *testing.B) {
		var released int64
		for b.Loop() {
			b.StopTimer()
			blocks.churn(size)
			b.StartTimer()
			released += Trim()
		}
		b.ReportMetric(float64(released)/float64(b.N)/(1<<20), "MiB-released/op")
	})
	b.Run("idle", func(b *testing.B) {
		Trim()
		for b.Loop() {
			Trim()
		}
	})
}

// BenchmarkAllocBesideTrim times single C allocations (32 KiB, allocated,
// written and freed, as a cache miss reads a block) on a thread whose
// arena holds 32 MiB in free chunks, alone and while another goroutine
// trims back to back: a trim holds each arena's lock while it releases
// that arena's free pages, so an allocation from it waits. It reports
// the allocations' percentiles and maximum; the trimming run is the worst
// case, a trim every moment instead of every 30 s or more.
func BenchmarkAllocBesideTrim(b *testing.B) {
	if !Available() {
		b.Skip("this C library has no malloc_trim")
	}
	for _, trimming := range []bool{false, true} {
		name := "alone"
		if trimming {
			name = "trimming"
		}
		b.Run(name, func(b *testing.B) {
			benchAllocBesideTrim(b, trimming)
		})
	}
}

func benchAllocBesideTrim(b *testing.B, trimming bool) {
	const n, size, perRound = 2048, 32 << 10, 1000
	stop := make(chan struct{})
	trimmerDone := make(chan struct{})
	var trimCount int
	go func() {
		defer close(trimmerDone)
		for trimming {
			select {
			case <-stop:
				return
			default:
			}
			Trim()
			trimCount++
		}
	}()
	// One OS thread, so the blocks and the timed allocations share an arena.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	blocks := allocBlocks(n, size)
	defer blocks.free()
	h := hdrhistogram.New(1, int64(time.Second), 3)
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		blocks.freeEveryOther()
		b.StartTimer()
		for i := 0; i < perRound && done < b.N; i++ {
			start := time.Now()
			allocWriteFree(size)
			_ = h.RecordValue(int64(time.Since(start)))
			done++
		}
		b.StopTimer()
		blocks.refillEveryOther(size)
		b.StartTimer()
	}
	b.StopTimer()
	close(stop)
	<-trimmerDone
	us := func(v int64) float64 { return float64(v) / 1e3 }
	b.ReportMetric(us(h.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(us(h.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(us(h.ValueAtQuantile(99.9)), "p99.9-µs")
	b.ReportMetric(us(h.Max()), "max-µs")
	if trimming {
		b.ReportMetric(float64(trimCount), "trims")
	}
}
