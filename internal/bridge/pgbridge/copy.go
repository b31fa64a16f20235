package pgbridge

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge"
)

// copy creates the slot, exporting its snapshot, reads the whole table in
// that snapshot and writes it to qs; the last batch stores the slot's
// consistent point, from which the stream continues. Keys under the prefix
// that qs held before and the table no longer does are deleted first.
func (b *Bridge) copy(ctx context.Context, conn *pgx.Conn, rc *pgconn.PgConn, ti tableInfo) error {
	slot, err := pglogrepl.CreateReplicationSlot(ctx, rc, b.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		if isPermission(err) {
			return fmt.Errorf("%w: create replication slot: %v", ErrPermission, err)
		}
		return fmt.Errorf("create replication slot %s: %w", b.cfg.Slot, err)
	}
	point, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("replication slot %s: consistent point %q: %w", b.cfg.Slot, slot.ConsistentPoint, err)
	}
	b.cfg.Log.Info("created replication slot; copying the table at its snapshot", "slot", b.cfg.Slot, "lsn", point)

	existing, err := b.w.Keys(ctx, b.cfg.Prefix)
	if err != nil {
		return writeError{err}
	}
	var keep map[string]struct{}
	if len(existing) > 0 {
		keep = map[string]struct{}{}
	}

	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin the copy: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+slot.SnapshotName+"'"); err != nil {
		return fmt.Errorf("use the slot's snapshot: %w", err)
	}
	exprs := make([]string, len(ti.cols))
	for i, c := range ti.cols {
		exprs[i] = pgx.Identifier{c.Name}.Sanitize() + "::text"
	}
	rows, err := tx.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+pgx.Identifier{b.schema, b.table}.Sanitize())
	if err != nil {
		return fmt.Errorf("read %s.%s: %w", b.schema, b.table, err)
	}
	defer rows.Close()

	// Rows are read and encoded here while earlier batches are written,
	// CopyWriters at a time: the pages of a copy hold distinct keys, and
	// only the final commit (after all of them) makes the copy count.
	batches := make(chan []client.Op, b.cfg.CopyWriters)
	written := make(chan error, b.cfg.CopyWriters)
	for range b.cfg.CopyWriters {
		go func() {
			var err error
			for ops := range batches {
				if err == nil {
					if err = b.w.Write(ctx, ops); err == nil {
						b.cfg.Metrics.RowsCopied.Add(float64(len(ops)))
					}
				}
			}
			written <- err
		}()
	}
	prog := newProgress(b.cfg, ti.rows)
	n, err := b.readRows(rows, ti, keep, batches, prog)
	close(batches)
	var werr error
	for range b.cfg.CopyWriters {
		werr = cmp.Or(werr, <-written)
	}
	if werr != nil {
		return writeError{fmt.Errorf("copy: %w", werr)}
	}
	if err != nil {
		return err
	}
	tx.Rollback(ctx)
	if keep != nil {
		gone, err := b.w.Sweep(ctx, b.cfg.Prefix, keep, b.cfg.CopyBatch)
		if err != nil {
			return writeError{err}
		}
		b.cfg.Log.Info("deleted the keys of rows no longer in the table", "keys", gone)
	}
	st := bridge.State{Source: b.source, Position: point.String(), Copied: true}
	if _, err := b.w.Commit(ctx, nil, st); err != nil {
		return writeError{err}
	}
	prog.done(n)
	return nil
}

func (b *Bridge) readRows(rows pgx.Rows, ti tableInfo, keep map[string]struct{}, out chan<- []client.Op, prog *progress) (int64, error) {
	var n int64
	ops := make([]client.Op, 0, b.cfg.CopyBatch)
	row := make([]Field, len(ti.cols))
	for rows.Next() {
		for i, v := range rows.RawValues() {
			if v == nil {
				row[i] = Field{Null: true}
			} else {
				row[i] = Field{Text: string(v)}
			}
		}
		key, err := KeyOf(b.cfg.Prefix, ti.keyCol, row)
		if err != nil {
			return n, fmt.Errorf("%w: copy: %v", ErrDecode, err)
		}
		val, err := RowJSON(ti.cols, row, nil)
		if err != nil {
			return n, fmt.Errorf("%w: copy: %s: %v", ErrDecode, key, err)
		}
		if keep != nil {
			keep[key] = struct{}{}
		}
		ops = append(ops, client.Op{Key: key, Value: val})
		n++
		if len(ops) == b.cfg.CopyBatch {
			out <- ops
			ops = make([]client.Op, 0, b.cfg.CopyBatch)
		}
		prog.tick(n)
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read %s.%s: %w", b.schema, b.table, err)
	}
	if len(ops) > 0 {
		out <- ops
	}
	return n, nil
}

// progress prints a line per second while the table is copied.
type progress struct {
	cfg   Config
	total int64
	start time.Time
	next  time.Time
}

func newProgress(cfg Config, total int64) *progress {
	now := time.Now()
	return &progress{cfg: cfg, total: total, start: now, next: now.Add(time.Second)}
}

func (p *progress) tick(n int64) {
	if p.cfg.Progress == nil || n%1024 != 0 {
		return
	}
	if now := time.Now(); now.After(p.next) {
		p.next = now.Add(time.Second)
		fmt.Fprintln(p.cfg.Progress, p.line(n, now))
	}
}

func (p *progress) line(n int64, now time.Time) string {
	rate := float64(n) / now.Sub(p.start).Seconds()
	s := fmt.Sprintf("copy %s: %d rows, %.0f rows/s", p.cfg.Table, n, rate)
	if p.total > 0 && n <= p.total {
		s += fmt.Sprintf(", about %d%% of %d", n*100/p.total, p.total)
	}
	return s
}

func (p *progress) done(n int64) {
	if p.cfg.Progress != nil {
		fmt.Fprintf(p.cfg.Progress, "copy %s: done, %d rows in %s\n", p.cfg.Table, n, time.Since(p.start).Round(time.Millisecond))
	}
}
