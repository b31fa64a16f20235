package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge"
)

// Config configures a Bridge.
type Config struct {
	// DSN is the PostgreSQL connection string (URL or key=value); the
	// bridge adds replication=database for its replication connection.
	DSN string
	// Table is TABLE or SCHEMA.TABLE (schema public by default).
	Table string
	// KeyColumn is the table's primary key column.
	KeyColumn string
	// Prefix is put before the key column's text to form each qs key.
	Prefix string
	// Slot is the replication slot. Default "qs_" + table name.
	Slot string
	// Publication is the publication. Default the slot's name.
	Publication string
	// StateKey is the qs key holding the bridge's position.
	// Default "_bridge/" + Slot.
	StateKey string
	// Client writes to the qs root.
	Client *client.Client
	// Resync makes the first session drop the slot (if any), create it
	// again and copy the whole table, deleting the keys of rows that are
	// gone: the recovery from a lost slot.
	Resync bool
	// CopyBatch is the most rows per qs batch of the initial copy.
	// Default 5000.
	CopyBatch int
	// CopyWriters is how many copy batches are written at once. Default 3.
	CopyWriters int
	// StatusInterval is how often the bridge reports its position to
	// PostgreSQL when idle. Default 10s.
	StatusInterval time.Duration
	// RetryMax bounds the pause between reconnections after a transient
	// error (the pause starts at 250ms and doubles). Default 10s.
	RetryMax time.Duration
	// Progress receives a line per second while copying (nil: none).
	Progress io.Writer
	// Log receives the bridge's log. Default: discard.
	Log *slog.Logger
	// Metrics are the collectors the bridge counts in. Default: a
	// private bridge.NewMetrics().
	Metrics *bridge.Metrics
}

func (c *Config) setDefaults() error {
	c.Metrics = bridge.OrNew(c.Metrics)
	if c.DSN == "" || c.Table == "" || c.KeyColumn == "" || c.Client == nil {
		return errors.New("pgbridge: DSN, table, key column and qs client are required")
	}
	_, table, err := SplitTable(c.Table)
	if err != nil {
		return err
	}
	if c.Slot == "" {
		c.Slot = "qs_" + strings.ToLower(table)
	}
	if !ValidSlotName(c.Slot) {
		return fmt.Errorf("pgbridge: slot name %q: want [a-z_][a-z0-9_]{0,62}", c.Slot)
	}
	if c.Publication == "" {
		c.Publication = c.Slot
	}
	if c.StateKey == "" {
		c.StateKey = "_bridge/" + c.Slot
	}
	if c.CopyBatch <= 0 {
		c.CopyBatch = 5000
	}
	if c.CopyWriters <= 0 {
		c.CopyWriters = 3
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = 10 * time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Bridge copies a table into qs and follows its changes.
type Bridge struct {
	cfg           Config
	schema, table string
	source        string
	w             *bridge.Writer
	resync        bool
}

// New checks cfg and returns a Bridge.
func New(cfg Config) (*Bridge, error) {
	if err := cfg.setDefaults(); err != nil {
		cfg.Metrics.Errors.WithLabelValues("config").Inc()
		return nil, err
	}
	schema, table, _ := SplitTable(cfg.Table)
	return &Bridge{
		cfg: cfg, schema: schema, table: table,
		source: fmt.Sprintf("postgres %s.%s slot %s", schema, table, cfg.Slot),
		w:      bridge.NewWriter(cfg.Client, cfg.StateKey),
		resync: cfg.Resync,
	}, nil
}

// Run copies the table if qs does not hold it yet, then follows changes
// until ctx ends (returning nil) or a configuration error stops it.
// Transient errors (PostgreSQL restarting, the root changing leader) make
// it reconnect and resume from the position stored in qs.
func (b *Bridge) Run(ctx context.Context) error {
	pause := 250 * time.Millisecond
	for {
		err := b.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if kind := fatalKind(err); kind != "" {
			b.cfg.Metrics.Errors.WithLabelValues(kind).Inc()
			return err
		}
		b.cfg.Metrics.Errors.WithLabelValues(transientKind(err)).Inc()
		b.cfg.Metrics.Restarts.Inc()
		b.cfg.Log.Warn("bridge interrupted; resuming from the position stored in qs", "err", err, "retry_in", pause)
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

// fatalKind names the metric kind of an error that retrying cannot fix,
// or "" for a transient one.
func fatalKind(err error) string {
	switch {
	case errors.Is(err, ErrSlotLost):
		return "slot_lost"
	case errors.Is(err, bridge.ErrStateConflict):
		return "conflict"
	case errors.Is(err, ErrDecode):
		return "decode"
	case errors.Is(err, ErrNoPrimaryKey), errors.Is(err, ErrKeyColumn), errors.Is(err, ErrWALLevel),
		errors.Is(err, ErrPermission), errors.Is(err, ErrNoTable), errors.Is(err, ErrPublication),
		errors.Is(err, bridge.ErrOtherSource), errors.Is(err, ErrSlotElsewhere), isPermission(err):
		return "config"
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 && ce.Status != 408 && ce.Status != 429 {
		return "write" // refused by qs: forbidden, too large, bad request
	}
	return ""
}

func transientKind(err error) string {
	if errors.Is(err, bridge.ErrStateMoved) {
		return "moved" // an earlier write landed late: resume from it
	}
	var we writeError
	if errors.As(err, &we) {
		return "write"
	}
	if errors.Is(err, ErrSlotInUse) {
		return "slot_in_use"
	}
	return "source"
}

// writeError marks an error from qs (as opposed to PostgreSQL).
type writeError struct{ err error }

func (e writeError) Error() string { return "write to qs: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

func (b *Bridge) session(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.cfg.DSN)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	ti, err := checkSource(ctx, conn, b.schema, b.table, b.cfg.KeyColumn)
	if err != nil {
		return err
	}
	if err := ensurePublication(ctx, conn, b.cfg.Publication, b.schema, b.table); err != nil {
		return err
	}
	st, ok, err := b.w.Load(ctx, b.source)
	if err != nil {
		return writeError{err}
	}
	exists, active, err := slotState(ctx, conn, b.cfg.Slot)
	if err != nil {
		return err
	}
	if active {
		// Another bridge streams from the slot, or PostgreSQL has not yet
		// noticed that the previous run of this one died: wait.
		return fmt.Errorf("%w: %s", ErrSlotInUse, b.cfg.Slot)
	}
	rc, err := b.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer rc.Close(context.Background())
	if !ok || !st.Copied || b.resync {
		if exists {
			b.cfg.Log.Info("dropping the replication slot of an unfinished copy", "slot", b.cfg.Slot)
			if err := pglogrepl.DropReplicationSlot(ctx, rc, b.cfg.Slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
				return fmt.Errorf("drop replication slot %s: %w", b.cfg.Slot, err)
			}
		}
		if err := b.copy(ctx, conn, rc, ti); err != nil {
			return err
		}
		b.resync = false
	} else if !exists {
		return fmt.Errorf("%w (slot %s, position %s)", ErrSlotLost, b.cfg.Slot, st.Position)
	}
	conn.Close(ctx)
	start, err := pglogrepl.ParseLSN(b.w.State().Position)
	if err != nil {
		return fmt.Errorf("state key %q: position %q: %w", b.cfg.StateKey, b.w.State().Position, err)
	}
	b.cfg.Metrics.CopyDone.Set(1)
	return b.stream(ctx, rc, start)
}

func (b *Bridge) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(b.cfg.DSN)
	if err != nil {
		b.cfg.Metrics.Errors.WithLabelValues("config").Inc()
		return nil, fmt.Errorf("PostgreSQL DSN: %w", err)
	}
	pc.RuntimeParams["replication"] = "database"
	rc, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		if isPermission(err) {
			return nil, fmt.Errorf("%w: replication connection: %v", ErrPermission, err)
		}
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	return rc, nil
}

// stream follows the slot from start (the position qs holds) and writes
// each transaction of the table as one batch.
func (b *Bridge) stream(ctx context.Context, rc *pgconn.PgConn, start pglogrepl.LSN) error {
	args := []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(b.cfg.Publication, "'", "''") + "'"}
	err := pglogrepl.StartReplication(ctx, rc, b.cfg.Slot, start, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
	if err != nil {
		if isSlotMissing(err) {
			return fmt.Errorf("%w (slot %s, position %s)", ErrSlotLost, b.cfg.Slot, start)
		}
		return fmt.Errorf("start replication: %w", err)
	}
	b.cfg.Log.Info("following changes", "slot", b.cfg.Slot, "from", start)
	dec := NewDecoder(b.schema, b.table, b.cfg.KeyColumn, b.cfg.Prefix)
	done := start      // qs holds every change up to here
	confirmed := start // reported to PostgreSQL as flushed
	b.cfg.Metrics.Position.Set(float64(done))
	next := time.Now().Add(b.cfg.StatusInterval)
	report := func() error {
		next = time.Now().Add(b.cfg.StatusInterval)
		return pglogrepl.SendStandbyStatusUpdate(ctx, rc, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed})
	}
	lag := func(end pglogrepl.LSN) {
		if end > done {
			b.cfg.Metrics.LagBytes.Set(float64(end - done))
		} else {
			b.cfg.Metrics.LagBytes.Set(0)
		}
	}
	for {
		if !time.Now().Before(next) {
			if err := report(); err != nil {
				return fmt.Errorf("report position: %w", err)
			}
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		raw, err := rc.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("replication stream: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			pe := pgconn.ErrorResponseToPgError(m)
			if isSlotMissing(pe) {
				return fmt.Errorf("%w (slot %s, position %s)", ErrSlotLost, b.cfg.Slot, done)
			}
			return fmt.Errorf("replication stream: %w", pe)
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("%w: keepalive: %v", ErrDecode, err)
				}
				lag(ka.ServerWALEnd)
				if !dec.InTxn() {
					// Everything committed before ServerWALEnd has been
					// sent and handled: nothing of the table lies below it.
					confirmed = max(confirmed, ka.ServerWALEnd)
					b.cfg.Metrics.LagSeconds.Set(0)
				}
				if ka.ReplyRequested {
					if err := report(); err != nil {
						return fmt.Errorf("report position: %w", err)
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("%w: %v", ErrDecode, err)
				}
				lag(xld.ServerWALEnd)
				msg, err := Parse(xld.WALData)
				if err != nil {
					return err
				}
				txn, err := dec.Handle(msg)
				if err != nil || txn == nil {
					if err != nil {
						return err
					}
					continue
				}
				applied, err := b.apply(ctx, txn, done)
				if err != nil {
					return err
				}
				if applied {
					done = txn.End
					b.cfg.Metrics.Position.Set(float64(done))
				}
				confirmed = max(confirmed, txn.End)
				lag(xld.ServerWALEnd)
				if err := report(); err != nil {
					return fmt.Errorf("report position: %w", err)
				}
			}
		}
	}
}

// apply writes txn as one batch with its end LSN, unless qs already holds
// it (done is at or past its end) or it changed nothing of the table.
func (b *Bridge) apply(ctx context.Context, txn *Txn, done pglogrepl.LSN) (bool, error) {
	if txn.End <= done {
		b.cfg.Metrics.Transactions.WithLabelValues("skipped").Inc()
		return false, nil
	}
	if len(txn.Changes) == 0 {
		return false, nil
	}
	b.cfg.Metrics.LagSeconds.Set(time.Since(txn.Time).Seconds())
	ops, err := Ops(ctx, txn.Changes, b.cfg.Prefix, b.w)
	if err != nil {
		if errors.Is(err, ErrDecode) {
			return false, err
		}
		return false, writeError{err}
	}
	st := bridge.State{Source: b.source, Position: txn.End.String(), Copied: true}
	if _, err := b.w.Commit(ctx, ops, st); err != nil {
		return false, writeError{err}
	}
	b.cfg.Metrics.ApplySeconds.Observe(time.Since(txn.Time).Seconds())
	b.cfg.Metrics.Transactions.WithLabelValues("applied").Inc()
	b.cfg.Metrics.ChangesApplied.Add(float64(len(ops)))
	return true, nil
}
