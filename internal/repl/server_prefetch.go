package repl

import (
	"bufio"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// A subscriber's queue: what a relay has resolved but not yet sent to it.
// Beyond either bound, values are dropped for that subscriber.
const (
	prefetchQueueValues = 4096
	prefetchQueueBytes  = 16 << 20
)

// prefetchHub hands what a relay resolves to its subscribers.
type prefetchHub struct {
	m  *Metrics
	n  atomic.Int32 // subscribers: lets publish skip the lock when 0
	mu sync.Mutex
	// subs is guarded by mu.
	subs map[*prefetchSub]struct{}
}

type prefetchSub struct {
	db    string
	pid   ProcessID
	ch    chan *Prefetch
	bytes atomic.Int64 // value and key bytes queued in ch
}

func (h *prefetchHub) subscribe(db string, pid ProcessID) *prefetchSub {
	sub := &prefetchSub{db: db, pid: pid, ch: make(chan *Prefetch, prefetchQueueValues)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[*prefetchSub]struct{}{}
	}
	h.subs[sub] = struct{}{}
	h.n.Add(1)
	h.m.prefetchSubscribers.Inc()
	return sub
}

func (h *prefetchHub) unsubscribe(sub *prefetchSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, sub)
	h.n.Add(-1)
	h.m.prefetchSubscribers.Dec()
}

// publish offers the values answered ok to every subscriber of db but
// the asker (it has them). It never blocks: a subscriber whose queue is
// full misses them.
func (h *prefetchHub) publish(db string, asker ProcessID, m *Fetch, ans *Values) {
	if h.n.Load() == 0 {
		return
	}
	var msgs []*Prefetch
	for i, r := range ans.Results {
		if r.Status != FetchOK {
			continue
		}
		// The key aliases the request's frame and the value the answer's
		// arena: the message gets its own copy of both.
		kv := make([]byte, len(m.Items[i].Key)+len(r.Value))
		n := copy(kv, m.Items[i].Key)
		copy(kv[n:], r.Value)
		msgs = append(msgs, &Prefetch{Index: r.Index, Key: kv[:n:n], Value: kv[n:]})
	}
	if len(msgs) == 0 {
		return
	}
	var queued, dropped int
	h.mu.Lock()
	for sub := range h.subs {
		if sub.db != db || sub.pid == asker {
			continue
		}
		for _, p := range msgs {
			size := int64(len(p.Key) + len(p.Value))
			if sub.bytes.Load()+size > prefetchQueueBytes {
				dropped++
				continue
			}
			select {
			case sub.ch <- p:
				sub.bytes.Add(size)
				queued++
			default:
				dropped++
			}
		}
	}
	h.mu.Unlock()
	h.m.addPublished(queued, dropped)
}

// servePrefetch sends a subscriber what this relay resolves, and Progress
// while there is nothing to send, until the subscriber hangs up (or sends
// anything), a write fails, or the server stops.
func (cn *conn) servePrefetch(ctx context.Context, r *bufio.Reader, st *store.Store, hello *Hello) {
	sub := cn.s.prefetch.subscribe(hello.Database, hello.ProcessID)
	defer cn.s.prefetch.unsubscribe(sub)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cn.c.SetReadDeadline(time.Time{})
	if !cn.s.goTracked(func() {
		defer cancel()
		var b [1]byte
		if _, err := r.Read(b[:]); err == nil {
			cn.log.Info("prefetch subscriber sent data after hello; closing")
		}
	}) {
		return
	}
	stop := context.AfterFunc(ctx, func() { cn.c.Close() })
	defer stop()
	cn.log.Info("prefetch subscriber connected")
	idle := time.NewTicker(cn.s.cfg.ProgressInterval)
	defer idle.Stop()
	sent := false
	var out []byte
	for {
		var m Message
		select {
		case <-ctx.Done():
			return
		case p := <-sub.ch:
			sub.bytes.Add(-int64(len(p.Key) + len(p.Value)))
			m, sent = p, true
		case <-idle.C:
			if sent {
				sent = false
				continue
			}
			pr := &Progress{AppliedIndex: st.AppliedIndex()}
			if t := st.AppliedTime(); !t.IsZero() {
				pr.AppliedTime = t.UnixNano()
			}
			m = pr
		}
		// Values queued behind this one go out in the same write.
		var err error
		if out, err = AppendFrame(out[:0], m); err == nil {
			// One write deadline per piece, as for every large message.
			for b := out; len(b) > 0 && err == nil; {
				n := min(len(b), writePiece)
				cn.c.SetWriteDeadline(time.Now().Add(cn.s.cfg.WriteTimeout))
				_, err = cn.w.Write(b[:n])
				b = b[n:]
			}
			if err == nil && len(sub.ch) == 0 {
				err = cn.w.Flush()
			}
		}
		if cap(out) > 1<<20 {
			out = nil
		}
		if err != nil {
			if ctx.Err() == nil {
				cn.log.Info("prefetch stream ended", "err", err)
			}
			return
		}
	}
}
