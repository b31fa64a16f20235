package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// serveFetch answers Fetch messages on a fetch or L2 connection, in order, until
// the client hangs up, sends something else, or the server stops. Each
// Fetch is answered from one view of the store (one applied index), so
// the answer is consistent with itself. Answers are flushed when no
// further request is already buffered, so a pipelining client gets its
// answers in few writes.
func (cn *conn) serveFetch(ctx context.Context, r *bufio.Reader, st *store.Store, hello *Hello) {
	ms := cn.s.cfg.Metrics
	ms.fetchConns.Inc()
	defer ms.fetchConns.Dec()
	stop := context.AfterFunc(ctx, func() { cn.c.Close() })
	defer stop()
	var fr frameReader
	var out []byte
	for {
		cn.c.SetReadDeadline(time.Now().Add(cn.s.cfg.FetchIdleTimeout))
		t, p, err := fr.next(r)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), ctx.Err() != nil:
			case errors.Is(err, ErrChecksum):
				ms.fetchRefused.WithLabelValues("crc").Inc()
				cn.log.Warn("fetch connection: corrupt frame; closing", "err", err)
			case errors.Is(err, ErrMalformed):
				cn.badFetch("decode", "%v", err)
			default:
				cn.log.Debug("fetch connection ended", "err", err)
			}
			return
		}
		if t != MsgFetch {
			cn.badFetch("unexpected", "%s message on a fetch connection", t)
			return
		}
		m, err := decodeFetch(p)
		if err == nil {
			err = checkFetchFlags(hello, m)
		}
		if err == nil && hello.Shard {
			err = checkShardFetch(m)
		}
		if err != nil {
			cn.badFetch("decode", "%v", err)
			return
		}
		start := time.Now()
		if !hello.Shard {
			catchUp(ctx, st, m, ms)
		}
		var ans *Values
		switch {
		case hello.Shard:
			ans = answerShard(st, m, ms)
		case st.IsProxy():
			ans = answerRelayFetch(st, m, ms)
			if m.Flags&FetchQuiet != 0 {
				ms.fetchQuiet.Inc()
			} else {
				cn.s.prefetch.publish(hello.Database, hello.ProcessID, m, ans)
			}
		default:
			ans = answerFetch(st, m, ms)
		}
		ms.fetchSeconds.Observe(time.Since(start).Seconds())
		ms.fetchRequests.Inc()
		if out, err = AppendFrame(out[:0], ans); err != nil {
			cn.log.Error("cannot encode a fetch answer", "err", err)
			return
		}
		cn.c.SetWriteDeadline(time.Now().Add(cn.s.cfg.WriteTimeout))
		if _, err := cn.w.Write(out); err != nil {
			return
		}
		if cap(out) > 1<<20 {
			out = nil
		}
		if r.Buffered() == 0 {
			if err := cn.w.Flush(); err != nil {
				return
			}
		}
	}
}

// checkFetchFlags refuses flags on a connection that cannot carry them:
// one opened with a Hello older than QuietVersion, or an L2 connection
// (whose answers are never published). Pure.
func checkFetchFlags(h *Hello, m *Fetch) error {
	switch {
	case m.Flags == 0:
		return nil
	case h.Shard:
		return fmt.Errorf("%w: fetch flags %#x on an L2 connection, which takes none", ErrMalformed, uint8(m.Flags))
	case h.Version < QuietVersion:
		return fmt.Errorf("%w: fetch flags %#x on a connection of version %d; flags need version %d", ErrMalformed, uint8(m.Flags), h.Version, QuietVersion)
	}
	return nil
}

// badFetch counts and refuses a bad request; the connection then closes.
func (cn *conn) badFetch(reason, format string, args ...any) {
	cn.s.cfg.Metrics.fetchRefused.WithLabelValues(reason).Inc()
	cn.refuse(RefuseBadRequest, format, args...)
}

// answerFetch reads every key of m at one view: the version current at
// min(asof, applied), which must be the one asked (if one is asked), and
// counts them in ms.
func answerFetch(st *store.Store, m *Fetch, ms *Metrics) *Values {
	ans := &Values{ID: m.ID, Results: make([]FetchResult, len(m.Items))}
	// Answer as of the published (durable) index, without waiting for a
	// commit in flight.
	v, applied, err := st.AsOfView()
	if err != nil {
		var counts [len(fetchStatusNames)]int
		for i := range ans.Results {
			ans.Results[i].Status = FetchError
		}
		counts[FetchError] = len(m.Items)
		ms.addFetchKeys(&counts)
		return ans
	}
	defer v.Close()
	ans.Applied = applied
	if ans.Horizon, err = v.HistoryHorizon(); err != nil {
		ans.Horizon = applied
	}
	asOf := m.AsOf
	if asOf == 0 {
		asOf = applied
	}
	var arena []byte
	size := 0
	var counts [len(fetchStatusNames)]int // keys by status, counted once per request
	for i, it := range m.Items {
		r := &ans.Results[i]
		need := it.Index
		if need == 0 {
			need = asOf
		}
		switch {
		case size >= maxValuesBytes:
			r.Status = FetchSkipped
		case applied < need:
			r.Status = FetchBehind
		default:
			val, idx, found, err := v.GetAt(it.Key, min(asOf, applied))
			switch {
			case errors.Is(err, store.ErrHistoryTruncated):
				r.Status = FetchGone
			case err != nil:
				r.Status = FetchError
			case !found && it.Index == 0:
				r.Status = FetchAbsent
			case !found || (it.Index != 0 && idx != it.Index):
				r.Status = FetchMismatch
			case len(val) > MaxFetchValueBytes:
				// No answer can carry it (answering anyway ended the
				// connection): the key fails, the others are answered.
				r.Status = FetchError
				ms.fetchTooLarge.Inc()
			case size > 0 && size+len(val) > maxValuesBytes:
				// The answer must fit one frame: asked again on its own, a
				// value as large as the limit is sent alone.
				r.Status = FetchSkipped
			default:
				start := len(arena)
				arena = append(arena, val...)
				r.Status, r.Index, r.Value = FetchOK, idx, arena[start:len(arena):len(arena)]
				size += len(val)
			}
		}
		counts[r.Status]++
	}
	ms.addFetchKeys(&counts)
	return ans
}

// fetchCatchUpWait bounds how long a fetch for a version this node has not
// applied yet waits for it. The asker is usually only a commit ahead (it
// applied the same stream a moment earlier); answering "behind" at once
// would send it round this node to another, and round a relay to the
// replicas after every burst of writes.
const fetchCatchUpWait = 100 * time.Millisecond

// testHookCatchUp, when set by a test, runs as a fetch starts waiting.
var testHookCatchUp func()

// catchUp waits, at most fetchCatchUpWait, until st applied the newest
// index m asks for (its as-of index or a version), and counts the outcome
// in ms.
func catchUp(ctx context.Context, st *store.Store, m *Fetch, ms *Metrics) {
	need := m.AsOf
	for i := range m.Items {
		need = max(need, m.Items[i].Index)
	}
	if need == 0 || st.AppliedIndex() >= need {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, fetchCatchUpWait)
	defer cancel()
	if testHookCatchUp != nil {
		testHookCatchUp()
	}
	_, err := st.WaitApplied(ctx, need)
	ms.countCatchUp(err == nil)
}
