package ctrim

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	qsmetrics "github.com/quicksilver-kv/qs/internal/metrics"
)

// How often Run trims: every MinInterval while trims give back memory,
// backing off to MaxInterval while they find little. A trim locks each of
// the allocator's arenas in turn while it walks their free chunks, so a
// C allocation on another thread may wait for it: measured on 2 busy
// cores, 10–20 ms for a heap with 128 MiB in free chunks (BenchmarkTrim).
const (
	MinInterval = 30 * time.Second
	MaxInterval = 5 * time.Minute
)

// Trims that give back less than littleBytes make Run wait twice as long
// for the next; more than muchBytes, half as long.
const (
	littleBytes = 1 << 20
	muchBytes   = 8 << 20
)

// NextInterval is how long to wait for the next trim after one that gave
// back released bytes, having waited cur: twice as long if it found
// little, half as long if it found much, within [MinInterval,
// MaxInterval].
func NextInterval(cur time.Duration, released int64) time.Duration {
	switch {
	case released < littleBytes:
		cur *= 2
	case released >= muchBytes:
		cur /= 2
	}
	return min(max(cur, MinInterval), MaxInterval)
}

// Available reports whether this process can trim its C allocator: a
// build with cgo and a C library with malloc_trim.
func Available() bool { return available() }

// Trim releases the C allocator's free pages to the system and returns
// the resident bytes that went (0 if it could not tell), counting the
// trim in the metrics. It does nothing if !Available().
func Trim() int64 {
	if !available() {
		return 0
	}
	before, okBefore := residentBytes()
	start := time.Now()
	trim()
	trimSeconds.Add(time.Since(start).Seconds())
	totals.trims.Add(1)
	after, okAfter := residentBytes()
	if !okBefore || !okAfter || after >= before {
		return 0
	}
	totals.released.Add(before - after)
	return before - after
}

// totals count the trims and what they gave back, for Totals and the
// metrics.
var totals struct{ trims, released atomic.Int64 }

// Totals returns the trims since the process started and the resident
// bytes they gave back.
func Totals() (trims, releasedBytes int64) {
	return totals.trims.Load(), totals.released.Load()
}

// ResidentBytes is the process's resident memory; false where it cannot
// be read (it is read from /proc/self/stat, Linux).
func ResidentBytes() (int64, bool) { return residentBytes() }

// Run keeps large blocks mapped on their own (see the package's doc) and
// trims until ctx ends, first after MinInterval, then as NextInterval
// says, each unless the environment sets glibc's own setting for it
// (EnvSettings). It returns at once if !Available() or if it has nothing
// to do, so a build without cgo has no timer for it.
func Run(ctx context.Context) {
	if !available() {
		return
	}
	set := EnvSettings(os.Environ())
	if !set.MmapThreshold {
		keepLargeBlocksMapped()
	}
	if set.TrimThreshold {
		return
	}
	trimming.Store(true)
	defer trimming.Store(false)
	wait := MinInterval
	interval.Set(wait.Seconds())
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wait = NextInterval(wait, Trim())
			interval.Set(wait.Seconds())
			t.Reset(wait)
		}
	}
}

// trimming is set while Run trims.
var trimming atomic.Bool

// Trimming reports whether Run is trimming the C allocator.
func Trimming() bool { return trimming.Load() }

// Settings are glibc's malloc settings an environment sets, which Run
// leaves alone: an operator who sets the trim threshold (the free memory
// at an arena's top that glibc keeps rather than returns) decides when
// memory goes back, and one who sets the mmap threshold has chosen it.
type Settings struct {
	TrimThreshold, MmapThreshold bool
}

// EnvSettings reads environ (os.Environ's form) for glibc's malloc
// settings: MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_, or
// glibc.malloc.trim_threshold and glibc.malloc.mmap_threshold in
// GLIBC_TUNABLES (colon-separated name=value pairs).
func EnvSettings(environ []string) Settings {
	var s Settings
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch name {
		case "MALLOC_TRIM_THRESHOLD_":
			s.TrimThreshold = true
		case "MALLOC_MMAP_THRESHOLD_":
			s.MmapThreshold = true
		case "GLIBC_TUNABLES":
			for _, t := range strings.Split(value, ":") {
				switch tname, _, _ := strings.Cut(t, "="); tname {
				case "glibc.malloc.trim_threshold":
					s.TrimThreshold = true
				case "glibc.malloc.mmap_threshold":
					s.MmapThreshold = true
				}
			}
		}
	}
	return s
}

// residentBytes is the process's resident memory, read as the Prometheus
// process collector reads it (/proc/self/stat, Linux); false elsewhere or
// if it cannot be read.
func residentBytes() (int64, bool) {
	p, err := procfs.Self()
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return int64(st.ResidentMemory()), true
}

var (
	trims = qsmetrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: qsmetrics.Namespace, Subsystem: "allocator", Name: "trims_total",
		Help: "Times the C allocator's free pages were returned to the system (malloc_trim; builds with cgo only, see internal/ctrim).",
	}, func() float64 { return float64(totals.trims.Load()) }))
	trimSeconds = qsmetrics.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: qsmetrics.Namespace, Subsystem: "allocator", Name: "trim_seconds_total",
		Help: "Time spent returning the C allocator's free pages to the system.",
	}))
	interval = qsmetrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: qsmetrics.Namespace, Subsystem: "allocator", Name: "trim_interval_seconds",
		Help: "How long until the next trim of the C allocator: longer while trims give little back (builds with cgo only).",
	}))
	released = qsmetrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: qsmetrics.Namespace, Subsystem: "allocator", Name: "trim_released_bytes_total",
		Help: "Resident memory the trims gave back to the system (the process's resident set just before each trim less just after).",
	}, func() float64 { return float64(totals.released.Load()) }))
)
