package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Configuration errors: the bridge stops on them, since retrying cannot help.
var (
	ErrNoPrimaryKey  = errors.New("pgbridge: the table has no primary key")
	ErrKeyColumn     = errors.New("pgbridge: the key column must be the table's whole primary key")
	ErrWALLevel      = errors.New("pgbridge: wal_level is not logical")
	ErrPermission    = errors.New("pgbridge: missing permission")
	ErrNoTable       = errors.New("pgbridge: no such table")
	ErrPublication   = errors.New("pgbridge: the publication does not publish the table")
	ErrSlotElsewhere = errors.New("pgbridge: a replication slot of that name exists for another database or plugin")
	// ErrSlotInUse is transient: the bridge retries until the slot is free
	// (a second bridge on the same slot waits as a standby).
	ErrSlotInUse = errors.New("pgbridge: the replication slot is in use by another connection (another bridge, or one that just died)")
	// ErrSlotLost says qs holds a position from a slot that no longer
	// exists: the changes since then are gone from PostgreSQL. Recover
	// with --resync (a new slot and a full copy that also deletes the keys
	// of rows gone meanwhile).
	ErrSlotLost = errors.New("pgbridge: the replication slot is gone; changes since the position stored in qs may be lost (restart with --resync to copy the table again)")
)

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSlotName reports whether s may name a replication slot (and is
// therefore safe in the replication commands, which take no quoting).
func ValidSlotName(s string) bool { return identRE.MatchString(s) }

// SplitTable splits "schema.table" (or "table", schema public).
func SplitTable(t string) (schema, table string, err error) {
	parts := strings.Split(t, ".")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return "public", parts[0], nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return parts[0], parts[1], nil
	}
	return "", "", fmt.Errorf("pgbridge: table %q: want TABLE or SCHEMA.TABLE", t)
}

// tableInfo is what the bridge learns about its table at start.
type tableInfo struct {
	oid    uint32
	cols   []Column
	keyCol int
	rows   int64 // the planner's estimate, for progress lines
}

// checkSource checks, over a normal connection, everything the bridge
// needs from PostgreSQL, and answers the first missing piece with a
// configuration error that says how to fix it.
func checkSource(ctx context.Context, conn *pgx.Conn, schema, table, keyColumn string) (tableInfo, error) {
	var ti tableInfo
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return ti, fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return ti, fmt.Errorf("%w: it is %q; set wal_level = logical in postgresql.conf and restart PostgreSQL", ErrWALLevel, level)
	}
	var user string
	var canReplicate bool
	if err := conn.QueryRow(ctx, "SELECT current_user, rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user").Scan(&user, &canReplicate); err != nil {
		return ti, fmt.Errorf("read the role's attributes: %w", err)
	}
	if !canReplicate {
		return ti, fmt.Errorf("%w: role %q lacks the REPLICATION attribute (ALTER ROLE %s REPLICATION)", ErrPermission, user, pgx.Identifier{user}.Sanitize())
	}
	err := conn.QueryRow(ctx, `SELECT c.oid, c.reltuples::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, table).Scan(&ti.oid, &ti.rows)
	if errors.Is(err, pgx.ErrNoRows) {
		return ti, fmt.Errorf("%w: %s.%s", ErrNoTable, schema, table)
	}
	if err != nil {
		return ti, fmt.Errorf("look up table %s.%s: %w", schema, table, err)
	}
	var canSelect bool
	if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1::oid, 'SELECT')", ti.oid).Scan(&canSelect); err != nil {
		return ti, fmt.Errorf("check SELECT on %s.%s: %w", schema, table, err)
	}
	if !canSelect {
		return ti, fmt.Errorf("%w: role %q may not SELECT from %s.%s (GRANT SELECT ON %s TO %s)", ErrPermission, user, schema, table,
			pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{user}.Sanitize())
	}
	rows, err := conn.Query(ctx, `SELECT attname, atttypid FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, ti.oid)
	if err != nil {
		return ti, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
	}
	ti.keyCol = -1
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type); err != nil {
			return ti, err
		}
		if c.Name == keyColumn {
			ti.keyCol = len(ti.cols)
		}
		ti.cols = append(ti.cols, c)
	}
	if err := rows.Err(); err != nil {
		return ti, err
	}
	if ti.keyCol < 0 {
		return ti, fmt.Errorf("%w: %s.%s has no column %q", ErrKeyColumn, schema, table, keyColumn)
	}
	var pk []string
	rows, err = conn.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1 AND i.indisprimary`, ti.oid)
	if err != nil {
		return ti, fmt.Errorf("read the primary key of %s.%s: %w", schema, table, err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return ti, err
		}
		pk = append(pk, n)
	}
	if err := rows.Err(); err != nil {
		return ti, err
	}
	switch {
	case len(pk) == 0:
		return ti, fmt.Errorf("%w: %s.%s (logical replication identifies deleted rows by it; ALTER TABLE %s ADD PRIMARY KEY (%s))",
			ErrNoPrimaryKey, schema, table, pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{keyColumn}.Sanitize())
	case len(pk) != 1 || pk[0] != keyColumn:
		return ti, fmt.Errorf("%w: %s.%s has primary key (%s), not (%s)", ErrKeyColumn, schema, table, strings.Join(pk, ", "), keyColumn)
	}
	return ti, nil
}

// ensurePublication creates the publication for the table if missing, and
// checks that an existing one publishes it.
func ensurePublication(ctx context.Context, conn *pgx.Conn, pub, schema, table string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", pub, err)
	}
	if !exists {
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{pub}.Sanitize(), pgx.Identifier{schema, table}.Sanitize())
		if _, err := conn.Exec(ctx, sql); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				return fmt.Errorf("%w: %s (the table's owner can run: %s)", ErrPermission, pe.Message, sql)
			}
			return fmt.Errorf("create publication %s: %w", pub, err)
		}
		return nil
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)",
		pub, schema, table).Scan(&ok); err != nil {
		return fmt.Errorf("read publication %s: %w", pub, err)
	}
	if !ok {
		return fmt.Errorf("%w: publication %s exists without %s.%s (ALTER PUBLICATION %s ADD TABLE %s)", ErrPublication, pub, schema, table,
			pgx.Identifier{pub}.Sanitize(), pgx.Identifier{schema, table}.Sanitize())
	}
	return nil
}

// slotState says whether the slot exists in this database and is in use.
// A slot of that name in another database (slot names are global to the
// server) is ErrSlotElsewhere.
func slotState(ctx context.Context, conn *pgx.Conn, slot string) (exists, active bool, err error) {
	var db, plugin, here string
	err = conn.QueryRow(ctx, "SELECT active, coalesce(database, ''), coalesce(plugin, ''), current_database() FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active, &db, &plugin, &here)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("look up replication slot %s: %w", slot, err)
	}
	if db != here || plugin != "pgoutput" {
		return false, false, fmt.Errorf("%w: slot %s (database %q, plugin %q); choose another --slot", ErrSlotElsewhere, slot, db, plugin)
	}
	return true, active, nil
}

// isSlotMissing reports whether err is PostgreSQL saying the slot does not exist.
func isSlotMissing(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42704" && strings.Contains(pe.Message, "replication slot")
}

// isPermission reports whether err is PostgreSQL refusing for lack of a privilege.
func isPermission(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}
