package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency histograms record nanoseconds from 1µs to 60s with 3 significant
// digits. Shorter and longer latencies are clamped to the range.
const (
	histMin    = int64(time.Microsecond)
	histMax    = int64(60 * time.Second)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// opCounter accumulates one kind of operation in one goroutine. It is not
// safe for concurrent use: each goroutine owns its counters, and they are
// merged after the goroutines are done.
type opCounter struct {
	hist  *hdrhistogram.Histogram
	ops   int64
	keys  int64
	bytes int64
}

func newOpCounter() *opCounter { return &opCounter{hist: newHist()} }

// add records one successful request that took d and moved keys keys and
// n value bytes.
func (c *opCounter) add(d time.Duration, keys, n int) {
	v := int64(d)
	v = max(histMin, min(v, histMax))
	// In range by construction, so RecordValue cannot fail.
	_ = c.hist.RecordValue(v)
	c.ops++
	c.keys += int64(keys)
	c.bytes += int64(n)
}

func (c *opCounter) merge(o *opCounter) {
	c.hist.Merge(o.hist)
	c.ops += o.ops
	c.keys += o.keys
	c.bytes += o.bytes
}

// errCounter counts failed requests by kind in one goroutine, keeping the
// first error message as an example.
type errCounter struct {
	total int64
	kinds map[string]int64
	first string
}

func (e *errCounter) add(err error) {
	if e.kinds == nil {
		e.kinds = map[string]int64{}
	}
	e.total++
	e.kinds[errKind(err)]++
	if e.first == "" {
		e.first = err.Error()
	}
}

func (e *errCounter) merge(o *errCounter) {
	for k, n := range o.kinds {
		if e.kinds == nil {
			e.kinds = map[string]int64{}
		}
		e.kinds[k] += n
	}
	e.total += o.total
	if e.first == "" {
		e.first = o.first
	}
}

// Errors that are not a failed request as such but a wrong answer.
var (
	errMiss     = errors.New("bench: key missing (it was loaded before the phase)")
	errBadValue = errors.New("bench: value differs from the one loaded")
)

// errDial wraps a failure to (re)connect.
type errDial struct{ err error }

func (e errDial) Error() string { return "connect: " + e.err.Error() }
func (e errDial) Unwrap() error { return e.err }

// errKind names the kind of a failed request for the report.
func errKind(err error) string {
	var re *ReplyError
	var he *HTTPError
	var de errDial
	var ne net.Error
	switch {
	case errors.As(err, &re):
		return re.Kind
	case errors.As(err, &he):
		return fmt.Sprintf("http_%d", he.Status)
	case errors.As(err, &de):
		return "connect"
	case errors.Is(err, ErrProtocol):
		return "protocol"
	case errors.Is(err, errMiss):
		return "miss"
	case errors.Is(err, errBadValue):
		return "bad_value"
	case errors.Is(err, errBadBatchReply):
		return "bad_reply"
	case errors.Is(err, errIndexNotIncreasing):
		return "index_not_increasing"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "io"
	}
}

// Latency summarizes a latency histogram, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	Max   float64 `json:"max_us"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return Latency{
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1e3,
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
	}
}

// OpStats is what one kind of request ("read", "write", "get", "mget",
// "batch") achieved in one phase against one target. Only successful
// requests count here; failures are in Phase.Errors.
type OpStats struct {
	Op         string  `json:"op"`
	Ops        int64   `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	Keys       int64   `json:"keys"`
	KeysPerSec float64 `json:"keys_per_sec"`
	// Bytes counts value bytes only (no keys, no protocol overhead);
	// MBPerSec is in 10^6 bytes per second.
	Bytes    int64   `json:"bytes"`
	MBPerSec float64 `json:"mb_per_sec"`
	Latency  Latency `json:"latency"`
}

func (c *opCounter) stats(op string, elapsed time.Duration) OpStats {
	s := OpStats{Op: op, Ops: c.ops, Keys: c.keys, Bytes: c.bytes, Latency: summarize(c.hist)}
	if sec := elapsed.Seconds(); sec > 0 {
		s.OpsPerSec = float64(c.ops) / sec
		s.KeysPerSec = float64(c.keys) / sec
		s.MBPerSec = float64(c.bytes) / sec / 1e6
	}
	return s
}
