package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quicksilver-kv/qs/internal/bridge/pgtest"
)

// pgWriter commits transactions against dsn in the background, each
// inserting row i of events and bumping the counter row, until stop is
// called; it returns how many it committed.
func pgWriter(t *testing.T, dsn string, max int) (committed *atomic.Int64, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	committed = &atomic.Int64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for i := 1; i <= max && ctx.Err() == nil; i++ {
			sql := fmt.Sprintf("BEGIN; INSERT INTO events VALUES (%d, 'e%d'); UPDATE events SET v = '%d' WHERE id = 0; COMMIT", i, i, i)
			for ctx.Err() == nil {
				if conn == nil {
					// (Re)connect; a transaction whose COMMIT's answer was
					// lost to a PostgreSQL crash may have committed.
					c, err := pgx.Connect(ctx, dsn)
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					conn = c
					var n int
					if conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM events WHERE id = %d", i)).Scan(&n); n == 1 {
						break
					}
				}
				if _, err := conn.Exec(ctx, sql); err == nil {
					break
				}
				conn.Close(context.Background())
				conn = nil
			}
			committed.Store(int64(i))
		}
	}()
	return committed, func() { cancel(); <-done }
}

const eventsTable = `CREATE TABLE events (id int PRIMARY KEY, v text); INSERT INTO events VALUES (0, 'counter')`

// waitCommitted waits until the writer has committed at least n transactions.
func waitCommitted(t *testing.T, c *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for c.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d transactions committed in 60s", c.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBridgePostgresKill9 kills the bridge with SIGKILL again and again
// while transactions stream in: after each restart it resumes from the
// position in qs, with no re-copy; every row arrives once, and the
// positions it stores only grow (no transaction applied twice).
func TestBridgePostgresKill9(t *testing.T) {
	_, slot, dsn := newPGDatabase(t)
	pgExec(t, dsn, eventsTable)
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	leaf := startQS(t, filepath.Join(dir, "leaf"), "--upstream", root.Addr["repl"])
	args := []string{"--dsn", dsn, "--table", "events", "--key-column", "id", "--prefix", "ev/", "--to", root.Addr["http"], "--slot", slot}
	b := startBridge(t, dir, args...)
	waitSameRows(t, leaf.client(t), dsn, "events", "id", "ev/")
	events := watchAll(t, leaf.Addr["http"], "")

	const total = 400
	committed, stop := pgWriter(t, dsn, total)
	defer stop()
	for round := 1; round <= 4; round++ {
		waitCommitted(t, committed, int64(round*total/5))
		if round == 1 {
			// A copy of the slot as it is now, behind what qs will hold.
			pgExec(t, dsn, "SELECT pg_copy_logical_replication_slot('"+slot+"', '"+slot+"_old')")
		}
		b.kill()
		if round == 3 {
			waitSlotInactive(t, dsn, slot)
			// The slot goes back in time (restored from the copy): only the
			// position in qs says where to resume.
			pgExec(t, dsn, "SELECT pg_drop_replication_slot('"+slot+"')",
				"SELECT pg_copy_logical_replication_slot('"+slot+"_old', '"+slot+"')",
				"SELECT pg_drop_replication_slot('"+slot+"_old')")
		}
		b = startBridge(t, dir, args...)
	}
	waitCommitted(t, committed, total)
	stop()
	waitSameRows(t, leaf.client(t), dsn, "events", "id", "ev/")
	if m := httpGetBody(t, "http://"+b.Addr["metrics"]+"/metrics"); !strings.Contains(m, "qs_bridge_rows_copied_total 0") {
		t.Errorf("a restarted bridge copied the table again:\n%s", grepLines(m, "qs_bridge_"))
	}
	b.stop()

	sets := map[string]int{}
	var positions []string
	deadline := time.After(60 * time.Second)
	for len(sets) < total+1 {
		select {
		case e := <-events:
			switch {
			case strings.HasPrefix(e.Key, "ev/") && e.Key != "ev/0" && !e.Deleted:
				sets[e.Key]++
			case e.Key == "_bridge/"+slot:
				var st struct{ Position string }
				json.Unmarshal(e.Value, &st)
				positions = append(positions, st.Position)
			}
			if e.Key == "ev/0" {
				sets[e.Key] = 1
			}
		case <-deadline:
			t.Fatalf("the watch saw %d of %d rows", len(sets), total+1)
		}
	}
	for k, n := range sets {
		if n != 1 {
			t.Errorf("%s set %d times", k, n)
		}
	}
	for i := 1; i < len(positions); i++ {
		if lsnOf(t, positions[i]) <= lsnOf(t, positions[i-1]) {
			t.Fatalf("stored position went from %s to %s: a transaction applied twice", positions[i-1], positions[i])
		}
	}
}

func lsnOf(t *testing.T, s string) uint64 {
	var hi, lo uint64
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		t.Fatalf("position %q: %v", s, err)
	}
	return hi<<32 | lo
}

// waitMetric waits until the bridge's metrics show name with a value > 0.
func waitMetric(t *testing.T, b *proc, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var m string
	for time.Now().Before(deadline) {
		m = httpGetBody(t, "http://"+b.Addr["metrics"]+"/metrics")
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, name+" ") && !strings.HasSuffix(l, " 0") {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("metric %s stayed 0 for 60s:\n%s", name, grepLines(m, "qs_bridge_"))
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitSlotInactive waits until no connection streams from slot (the
// server notices a killed client).
func waitSlotInactive(t *testing.T, dsn, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var active bool
		if err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil {
			t.Fatalf("slot %s: %v", slot, err)
		}
		if !active {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBridgePostgresRestart crashes PostgreSQL (immediate shutdown)
// while transactions stream: the bridge reconnects and loses nothing.
func TestBridgePostgresRestart(t *testing.T) {
	pg, slot, dsn := newPGDatabase(t)
	pgExec(t, dsn, eventsTable)
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	b := startBridge(t, dir, "--dsn", dsn, "--table", "events", "--key-column", "id", "--prefix", "ev/", "--to", root.Addr["http"], "--slot", slot)
	rc := root.client(t)
	waitSameRows(t, rc, dsn, "events", "id", "ev/")
	committed, stop := pgWriter(t, dsn, 200)
	defer stop()
	waitCommitted(t, committed, 50)
	if err := pg.Crash(); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, committed, 200)
	stop()
	waitSameRows(t, rc, dsn, "events", "id", "ev/")
	waitMetric(t, b, "qs_bridge_restarts_total")
	b.stop()
}

// TestBridgePostgresDroppedSlot: a slot dropped under the bridge stops it
// with an error naming the recovery, and --resync recovers: a new slot, a
// new copy, and the keys of rows deleted while no slot kept them are gone.
func TestBridgePostgresDroppedSlot(t *testing.T) {
	_, slot, dsn := newPGDatabase(t)
	pgExec(t, dsn, eventsTable, "INSERT INTO events SELECT i, 'x' FROM generate_series(1, 50) i")
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	rc := root.client(t)
	args := []string{"--dsn", dsn, "--table", "events", "--key-column", "id", "--prefix", "ev/", "--to", root.Addr["http"], "--slot", slot}
	b := startBridge(t, dir, args...)
	waitSameRows(t, rc, dsn, "events", "id", "ev/")

	// The slot is dropped while the bridge streams from it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot)
			if err == nil {
				_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
			}
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drop the slot: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pgExec(t, dsn, "DELETE FROM events WHERE id <= 10", "INSERT INTO events VALUES (100, 'while no slot')")
	select {
	case <-b.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the bridge did not stop when its slot was dropped")
	}
	if code := b.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(b.out.String(), "replication slot is gone") || !strings.Contains(b.out.String(), "--resync") {
		t.Fatalf("bridge exited %d:\n%s", code, b.out.String())
	}
	// Started again it refuses, rather than skipping what it missed.
	out, code := runQSTimeout(t, 60*time.Second, append([]string{"bridge", "postgres"}, args...)...)
	if code == 0 || !strings.Contains(out, "replication slot is gone") {
		t.Fatalf("bridge without its slot exited %d:\n%s", code, out)
	}
	b = startBridge(t, dir, append(args, "--resync")...)
	waitSameRows(t, rc, dsn, "events", "id", "ev/")
	pgExec(t, dsn, "UPDATE events SET v = 'after resync' WHERE id = 20")
	waitSameRows(t, rc, dsn, "events", "id", "ev/")
	b.stop()
}

// TestBridgePostgresRefusals: the configuration errors stop the bridge at
// once with a message that says how to fix them, and write nothing.
func TestBridgePostgresRefusals(t *testing.T) {
	_, db, dsn := newPGDatabase(t)
	pgExec(t, dsn, "CREATE TABLE nopk (name text, v int)", "CREATE TABLE twokeys (a int, b int, PRIMARY KEY (a, b))",
		eventsTable, "CREATE ROLE plain LOGIN", "CREATE ROLE repl LOGIN REPLICATION")
	root := startQS(t, t.TempDir())
	to := root.Addr["http"]
	cases := []struct {
		name, dsn, table, key, want string
	}{
		{"no primary key", dsn, "nopk", "name", "the table has no primary key: public.nopk"},
		{"key column not the primary key", dsn, "twokeys", "a", "has primary key (a, b), not (a)"},
		{"no such table", dsn, "nothere", "id", "no such table: public.nothere"},
		{"no REPLICATION attribute", shared.pg.DSN(db, "plain"), "events", "id", `role "plain" lacks the REPLICATION attribute`},
		{"no SELECT privilege", shared.pg.DSN(db, "repl"), "events", "id", `role "repl" may not SELECT from public.events`},
	}
	pgExec(t, shared.pg.DSN("postgres", "postgres"), "SELECT pg_create_logical_replication_slot('"+db+"', 'pgoutput')")
	t.Cleanup(func() { pgExec(t, shared.pg.DSN("postgres", "postgres"), "SELECT pg_drop_replication_slot('"+db+"')") })
	cases = append(cases, struct{ name, dsn, table, key, want string }{
		"slot of another database", dsn, "events", "id", "replication slot of that name exists for another database"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runQSTimeout(t, 60*time.Second, "bridge", "postgres", "--dsn", tc.dsn, "--table", tc.table, "--key-column", tc.key, "--to", to, "--slot", db)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant %q", code, out, tc.want)
			}
		})
	}
	pgExec(t, dsn, "GRANT SELECT ON events TO repl")
	t.Run("publication needs the table's owner", func(t *testing.T) {
		out, code := runQSTimeout(t, 60*time.Second, "bridge", "postgres", "--dsn", shared.pg.DSN(db, "repl"), "--table", "events", "--key-column", "id", "--to", to, "--slot", db+"_2")
		if code == 0 || !strings.Contains(out, "missing permission") || !strings.Contains(out, "CREATE PUBLICATION") {
			t.Fatalf("exit %d, output:\n%s", code, out)
		}
	})
	if rows, err := qsRows(root.client(t), ""); err != nil || len(rows) != 0 {
		t.Fatalf("refused bridges wrote %v (%v)", rows, err)
	}
}

// TestBridgePostgresWALLevel: a server whose wal_level is not logical is
// refused with the setting to change.
func TestBridgePostgresWALLevel(t *testing.T) {
	sharedPostgres(t) // skips without PostgreSQL
	dir := t.TempDir()
	pg, err := pgtest.Start(dir, "replica")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	pgExec(t, pg.DSN("postgres", "postgres"), eventsTable)
	root := startQS(t, t.TempDir())
	out, code := runQSTimeout(t, 60*time.Second, "bridge", "postgres", "--dsn", pg.DSN("postgres", "postgres"), "--table", "events", "--key-column", "id", "--to", root.Addr["http"])
	if code == 0 || !strings.Contains(out, `wal_level is not logical: it is "replica"; set wal_level = logical`) {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// TestBridgePostgresHARoot streams into a three-member root and kills its
// leader mid-stream: the bridge moves to the new leader, and the root
// ends up holding the table.
func TestBridgePostgresHARoot(t *testing.T) {
	_, slot, dsn := newPGDatabase(t)
	pgExec(t, dsn, eventsTable)
	c := newRaftCluster(t, 3)
	c.startAll()
	lead := c.leader(60 * time.Second)
	b := startBridge(t, t.TempDir(), "--dsn", dsn, "--table", "events", "--key-column", "id", "--prefix", "ev/",
		"--to", strings.Join(c.httpAddrs(), ","), "--slot", slot)
	committed, stop := pgWriter(t, dsn, 300)
	defer stop()
	waitCommitted(t, committed, 100)
	lead.p.kill()
	var alive []string
	for _, m := range c.members {
		if m != lead {
			alive = append(alive, m.http)
		}
	}
	waitCommitted(t, committed, 300)
	stop()
	waitSameRows(t, c.client(alive, 5), dsn, "events", "id", "ev/")
	b.stop()
}
