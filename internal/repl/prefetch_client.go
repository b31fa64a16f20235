package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// PrefetchConfig configures a proxy's subscriptions to the prefetch
// streams of its relays.
type PrefetchConfig struct {
	Database  string
	DBID      store.DBID
	ProcessID ProcessID
	Relays    []string // replication addresses
	Dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	// IdleTimeout ends a subscription that received nothing (a value or
	// Progress) for this long. Default 10s.
	IdleTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait before reconnecting.
	// Defaults 100ms and 5s.
	BackoffMin, BackoffMax time.Duration
	// Metrics counts what the subscriptions receive; the process gives
	// all its prefetchers the one it registered. Default: a private
	// NewMetrics(), registered nowhere.
	Metrics *Metrics
}

// PrefetchStats counts what a proxy's subscriptions received.
type PrefetchStats struct {
	Received, Admitted, Dropped, Refused int64
}

// Prefetcher keeps one subscription to each relay of a proxy, and offers
// every value received to the store's transient tier. A subscription
// that breaks is opened again; what was published meanwhile is lost,
// which costs only fetches.
type Prefetcher struct {
	cfg    PrefetchConfig
	st     *store.Store
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	received, admitted, dropped, refused atomic.Int64
	// The series of prefetched_total, resolved on first use.
	series struct{ received, admitted, dropped counterOnUse }
}

// StartPrefetch subscribes to every relay of cfg until Close.
func StartPrefetch(cfg PrefetchConfig, st *store.Store, log *slog.Logger) *Prefetcher {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 100 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(5*time.Second, cfg.BackoffMin)
	}
	if cfg.ProcessID.IsZero() {
		cfg.ProcessID = DefaultProcessID
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prefetcher{cfg: cfg, st: st, log: log.With("component", "prefetch", "db", cfg.Database), cancel: cancel}
	for _, addr := range cfg.Relays {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.run(ctx, addr)
		}()
	}
	return p
}

// Close ends every subscription and waits for them.
func (p *Prefetcher) Close() {
	p.cancel()
	p.wg.Wait()
}

// Stats returns the counts since the start.
func (p *Prefetcher) Stats() PrefetchStats {
	return PrefetchStats{Received: p.received.Load(), Admitted: p.admitted.Load(), Dropped: p.dropped.Load(), Refused: p.refused.Load()}
}

// run subscribes to addr again and again until ctx ends.
func (p *Prefetcher) run(ctx context.Context, addr string) {
	wait := p.cfg.BackoffMin
	for ctx.Err() == nil {
		subscribed, err := p.subscribe(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if subscribed {
			wait = p.cfg.BackoffMin
		}
		p.log.Debug("prefetch subscription ended", "relay", addr, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, p.cfg.BackoffMax)
	}
}

// subscribe opens one subscription and reads it until it ends; subscribed
// reports whether the relay accepted it.
func (p *Prefetcher) subscribe(ctx context.Context, addr string) (subscribed bool, err error) {
	hctx, cancel := context.WithTimeout(ctx, p.cfg.IdleTimeout)
	c, err := p.cfg.Dial(hctx, "tcp", addr)
	cancel()
	if err != nil {
		return false, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(p.cfg.IdleTimeout))
	hello := &Hello{Version: FetchVersion, Prefetch: true, Database: p.cfg.Database, DBID: p.cfg.DBID, ProcessID: p.cfg.ProcessID}
	if err := WriteMessage(c, hello); err != nil {
		return false, fmt.Errorf("send prefetch hello: %w", err)
	}
	c.SetWriteDeadline(time.Time{})
	r := bufio.NewReaderSize(c, 64<<10)
	m, err := ReadMessage(r)
	if err != nil {
		return false, fmt.Errorf("prefetch handshake: %w", err)
	}
	switch m := m.(type) {
	case *Welcome:
		if !p.cfg.DBID.IsZero() && m.DBID != p.cfg.DBID {
			return false, fmt.Errorf("%s serves database id %s, want %s", addr, m.DBID, p.cfg.DBID)
		}
	case *Refuse:
		p.log.Warn("relay refused the prefetch subscription", "relay", addr, "code", m.Code.String(), "reason", m.Reason)
		return false, &RefusedError{Code: m.Code, Reason: m.Reason}
	default:
		return false, fmt.Errorf("%w: prefetch hello answered with %s", ErrMalformed, m.Type())
	}
	p.log.Info("subscribed to a relay's prefetch stream", "relay", addr)
	for {
		c.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout))
		m, err := ReadMessage(r)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, ErrChecksum):
				p.refuse("crc", addr, err)
			case errors.Is(err, ErrMalformed):
				p.refuse("decode", addr, err)
			case errors.Is(err, io.ErrUnexpectedEOF):
				p.refuse("truncated", addr, err)
			}
			return true, err
		}
		switch m := m.(type) {
		case *Prefetch:
			p.offer(m)
		case *Progress:
		default:
			err := fmt.Errorf("%w: unexpected %s on a prefetch stream", ErrMalformed, m.Type())
			p.refuse("unexpected", addr, err)
			return true, err
		}
	}
}

func (p *Prefetcher) offer(m *Prefetch) {
	vec, db := p.cfg.Metrics.prefetched, p.cfg.Database
	p.received.Add(1)
	p.series.received.of(vec, db, "received").Inc()
	if p.st.OfferPrefetched(m.Key, m.Index, m.Value) {
		p.admitted.Add(1)
		p.series.admitted.of(vec, db, "admitted").Inc()
		return
	}
	p.dropped.Add(1)
	p.series.dropped.of(vec, db, "dropped").Inc()
}

func (p *Prefetcher) refuse(reason, addr string, err error) {
	p.refused.Add(1)
	p.cfg.Metrics.prefetchRefused.WithLabelValues(p.cfg.Database, reason).Inc()
	p.log.Warn("refused a prefetch stream message; reconnecting", "relay", addr, "reason", reason, "err", err)
}
