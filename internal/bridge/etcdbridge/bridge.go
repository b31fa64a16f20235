package etcdbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge"
)

// ErrCompacted says etcd has compacted its history past the revision qs
// holds: the changes since then cannot be replayed.
var ErrCompacted = errors.New("etcdbridge: etcd compacted its history past the revision stored in qs; changes since then are lost to the bridge (restart with --resync to copy the prefix again)")

// Config configures a Bridge.
type Config struct {
	// Endpoints are etcd's client URLs.
	Endpoints []string
	// Prefix is the etcd key prefix to copy ("" : every key).
	Prefix string
	// ToPrefix replaces Prefix in the qs keys. Default: Prefix (same keys).
	ToPrefix *string
	// StateKey is the qs key holding the revision. Default
	// "_bridge/etcd/" + Prefix.
	StateKey string
	// Client writes to the qs root.
	Client *client.Client
	// Resync copies the prefix again (deleting the qs keys of etcd keys
	// gone), whatever revision qs holds: the recovery from ErrCompacted.
	Resync bool
	// CopyBatch is the most keys per qs batch of the copy. Default 5000.
	CopyBatch int
	// RetryMax bounds the pause between reconnections. Default 10s.
	RetryMax time.Duration
	// Progress receives a line per page while copying (nil: none).
	Progress io.Writer
	// Log receives the bridge's log. Default: discard.
	Log *slog.Logger
	// Metrics are the collectors the bridge counts in. Default: a
	// private bridge.NewMetrics().
	Metrics *bridge.Metrics
}

// Bridge copies an etcd prefix into qs and follows its changes.
type Bridge struct {
	cfg    Config
	to     string
	source string
	w      *bridge.Writer
	resync bool
}

// New checks cfg and returns a Bridge.
func New(cfg Config) (*Bridge, error) {
	cfg.Metrics = bridge.OrNew(cfg.Metrics)
	if len(cfg.Endpoints) == 0 || cfg.Client == nil {
		cfg.Metrics.Errors.WithLabelValues("config").Inc()
		return nil, errors.New("etcdbridge: endpoints and qs client are required")
	}
	to := cfg.Prefix
	if cfg.ToPrefix != nil {
		to = *cfg.ToPrefix
	}
	if cfg.StateKey == "" {
		cfg.StateKey = "_bridge/etcd/" + cfg.Prefix
	}
	if cfg.CopyBatch <= 0 {
		cfg.CopyBatch = 5000
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Bridge{cfg: cfg, to: to, source: fmt.Sprintf("etcd prefix %q", cfg.Prefix),
		w: bridge.NewWriter(cfg.Client, cfg.StateKey), resync: cfg.Resync}, nil
}

// Run copies the prefix if qs does not hold it yet, then follows changes
// until ctx ends (nil) or an error retrying cannot fix.
func (b *Bridge) Run(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: b.cfg.Endpoints, DialTimeout: 5 * time.Second, Context: ctx})
	if err != nil {
		b.cfg.Metrics.Errors.WithLabelValues("config").Inc()
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	pause := 250 * time.Millisecond
	for {
		err := b.session(ctx, cli)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, ErrCompacted):
			b.cfg.Metrics.Errors.WithLabelValues("compacted").Inc()
			return err
		case errors.Is(err, bridge.ErrStateConflict):
			b.cfg.Metrics.Errors.WithLabelValues("conflict").Inc()
			return err
		case errors.Is(err, bridge.ErrOtherSource), errors.Is(err, errBadState):
			b.cfg.Metrics.Errors.WithLabelValues("config").Inc()
			return err
		}
		var ce *client.Error
		kind := "source"
		if errors.Is(err, bridge.ErrStateMoved) {
			kind = "moved" // an earlier write landed late: resume from it
		} else if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 && ce.Status != 408 && ce.Status != 429 {
			b.cfg.Metrics.Errors.WithLabelValues("write").Inc()
			return err
		}
		b.cfg.Metrics.Errors.WithLabelValues(kind).Inc()
		b.cfg.Metrics.Restarts.Inc()
		b.cfg.Log.Warn("bridge interrupted; resuming from the revision stored in qs", "err", err, "retry_in", pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, b.cfg.RetryMax)
	}
}

var errBadState = errors.New("etcdbridge: the state key holds no revision")

func (b *Bridge) session(ctx context.Context, cli *clientv3.Client) error {
	st, ok, err := b.w.Load(ctx, b.source)
	if err != nil {
		return err
	}
	if !ok || !st.Copied || b.resync {
		if err := b.copy(ctx, cli); err != nil {
			return err
		}
		b.resync = false
	}
	rev, err := strconv.ParseInt(b.w.State().Position, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", errBadState, b.w.State().Position, err)
	}
	b.cfg.Metrics.CopyDone.Set(1)
	return b.follow(ctx, cli, rev)
}

// copy reads the prefix at one revision, page by page, and writes it; the
// last batch stores the revision.
func (b *Bridge) copy(ctx context.Context, cli *clientv3.Client) error {
	existing, err := b.w.Keys(ctx, b.to)
	if err != nil {
		return err
	}
	var keep map[string]struct{}
	if len(existing) > 0 {
		keep = map[string]struct{}{}
	}
	end := clientv3.GetPrefixRangeEnd(b.cfg.Prefix)
	if b.cfg.Prefix == "" {
		end = "\x00"
	}
	start := b.cfg.Prefix
	if start == "" {
		start = "\x00"
	}
	var rev int64
	n := 0
	t0 := time.Now()
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(b.cfg.CopyBatch))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		if err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("copy at revision %d: etcd compacted it meanwhile: %w", rev, err)
			}
			return fmt.Errorf("etcd get: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		ops := make([]client.Op, 0, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			k := MapKey(string(kv.Key), b.cfg.Prefix, b.to)
			if keep != nil {
				keep[k] = struct{}{}
			}
			v := kv.Value
			if v == nil {
				v = []byte{}
			}
			ops = append(ops, client.Op{Key: k, Value: v})
		}
		if err := b.w.Write(ctx, ops); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		n += len(ops)
		b.cfg.Metrics.RowsCopied.Add(float64(len(ops)))
		if b.cfg.Progress != nil {
			fmt.Fprintf(b.cfg.Progress, "copy etcd prefix %q at revision %d: %d keys\n", b.cfg.Prefix, rev, n)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if keep != nil {
		if _, err := b.w.Sweep(ctx, b.to, keep, b.cfg.CopyBatch); err != nil {
			return err
		}
	}
	if _, err := b.w.Commit(ctx, nil, bridge.State{Source: b.source, Position: strconv.FormatInt(rev, 10), Copied: true}); err != nil {
		return err
	}
	if b.cfg.Progress != nil {
		fmt.Fprintf(b.cfg.Progress, "copy etcd prefix %q: done, %d keys at revision %d in %s\n", b.cfg.Prefix, n, rev, time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// follow watches the prefix from the revision after rev and writes each
// revision as one batch.
func (b *Bridge) follow(ctx context.Context, cli *clientv3.Client, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(rev + 1), clientv3.WithProgressNotify()}
	if b.cfg.Prefix != "" {
		opts = append(opts, clientv3.WithPrefix())
	} else {
		opts = append(opts, clientv3.WithFromKey())
	}
	key := b.cfg.Prefix
	if key == "" {
		key = "\x00"
	}
	b.cfg.Log.Info("following changes", "prefix", b.cfg.Prefix, "from_revision", rev+1)
	b.cfg.Metrics.Position.Set(float64(rev))
	for resp := range cli.Watch(wctx, key, opts...) {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return fmt.Errorf("%w (qs holds revision %d, etcd compacted up to %d)", ErrCompacted, rev, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("etcd watch: %w", err)
		}
		for _, r := range Group(resp.Events) {
			if r.Rev <= rev {
				b.cfg.Metrics.Transactions.WithLabelValues("skipped").Inc()
				continue
			}
			ops := Ops(r, b.cfg.Prefix, b.to)
			st := bridge.State{Source: b.source, Position: strconv.FormatInt(r.Rev, 10), Copied: true}
			if _, err := b.w.Commit(ctx, ops, st); err != nil {
				return err
			}
			rev = r.Rev
			b.cfg.Metrics.Transactions.WithLabelValues("applied").Inc()
			b.cfg.Metrics.ChangesApplied.Add(float64(len(ops)))
			b.cfg.Metrics.Position.Set(float64(rev))
		}
		if h := resp.Header.Revision; h > rev {
			b.cfg.Metrics.LagRevisions.Set(float64(h - rev))
		} else {
			b.cfg.Metrics.LagRevisions.Set(0)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("etcd watch ended")
}
