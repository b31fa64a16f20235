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
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for i := 1; i <= max && ctx.Err() == nil; i++ {
			sql := fmt.Sprintf("BEGIN; INSERT INTO events VALUES (%d, 'e%d'); UPDATE events SET v = '%d' WHERE id = 0; COMMIT", i, i, i)
			for ctx.Err() == nil {
				if _, err := conn.Exec(ctx, sql); err == nil {
					break
				}
				// PostgreSQL restarting: reconnect and retry the transaction,
				// unless it committed before the connection broke.
				time.Sleep(50 * time.Millisecond)
				conn.Close(context.Background())
				if conn, err = pgx.Connect(ctx, dsn); err != nil {
					continue
				}
				var n int
				if conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM events WHERE id = %d", i)).Scan(&n); n == 1 {
					break
				}
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
	_, _, dsn := newPGDatabase(t)
	pgExec(t, dsn, eventsTable)
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	leaf := startQS(t, filepath.Join(dir, "leaf"), "--upstream", root.Addr["repl"])
	args := []string{"--dsn", dsn, "--table", "events", "--key-column", "id", "--prefix", "ev/", "--to", root.Addr["http"]}
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
			pgExec(t, dsn, "SELECT pg_copy_logical_replication_slot('qs_events', 'qs_events_old')")
		}
		b.kill()
		if round == 3 {
			waitSlotInactive(t, dsn, "qs_events")
			// The slot goes back in time (restored from the copy): only the
			// position in qs says where to resume.
			pgExec(t, dsn, "SELECT pg_drop_replication_slot('qs_events')",
				"SELECT pg_copy_logical_replication_slot('qs_events_old', 'qs_events')",
				"SELECT pg_drop_replication_slot('qs_events_old')")
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
			case e.Key == "_bridge/qs_events":
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
