package watch

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// probe measures what watch delivery costs readers: how late a goroutine
// woken by the network runs. It writes a byte to a pipe that a goroutine
// of its own waits on through the runtime's network poller, exactly as a
// connection's goroutine waits for a reader's request, and measures the
// time from the write to that goroutine running.
//
// The Go scheduler runs goroutines made runnable by other goroutines and
// timers (watchers taking turns) before it polls the network, and the
// operating system shares the CPUs with other processes: both delay the
// probe as they delay readers. Goroutines queuing by themselves do not:
// the probe is not one of them (unlike the runtime's /sched/latencies,
// which counts every goroutine, watchers included).
//
// One probe is in flight at a time. send and take are called by one
// goroutine (the budget's controller); readLoop runs on another until
// close.
type probe struct {
	r, w    *os.File
	sent    atomic.Int64        // Unix nanoseconds the probe in flight was sent, 0 if none
	delayed prometheus.Observer // every delay, in seconds (wake_delay_seconds)

	mu struct {
		sync.Mutex
		delays []time.Duration // since the last take
	}
}

// newProbe returns a probe that also observes every delay in delayed.
func newProbe(delayed prometheus.Observer) (*probe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watch: probe pipe: %w", err)
	}
	return &probe{r: r, w: w, delayed: delayed}, nil
}

// send sends a probe unless one is in flight; now must be the time of
// the call.
func (p *probe) send(now time.Time) {
	if p.sent.Load() != 0 {
		return
	}
	p.sent.Store(now.UnixNano())
	if _, err := p.w.Write([]byte{1}); err != nil {
		p.sent.Store(0) // closed: readLoop has ended or is ending
	}
}

// readLoop records the delay of every probe until the pipe is closed.
func (p *probe) readLoop() {
	var b [1]byte
	for {
		if _, err := p.r.Read(b[:]); err != nil {
			return
		}
		now := time.Now().UnixNano()
		t0 := p.sent.Swap(0)
		if t0 == 0 {
			continue
		}
		d := time.Duration(now - t0)
		p.delayed.Observe(d.Seconds())
		p.mu.Lock()
		p.mu.delays = append(p.mu.delays, d)
		p.mu.Unlock()
	}
}

// take returns the delays measured since the last take, appended to dst,
// and, as one more, the age of a probe still in flight for longer than
// late: a starved probe is a delay too.
func (p *probe) take(dst []time.Duration, now time.Time, late time.Duration) []time.Duration {
	p.mu.Lock()
	dst = append(dst, p.mu.delays...)
	p.mu.delays = p.mu.delays[:0]
	p.mu.Unlock()
	if t0 := p.sent.Load(); t0 != 0 {
		if age := time.Duration(now.UnixNano() - t0); age >= late {
			dst = append(dst, age)
		}
	}
	return dst
}

// close ends readLoop (the read fails) and frees the pipe.
func (p *probe) close() {
	p.w.Close()
	p.r.Close()
}
