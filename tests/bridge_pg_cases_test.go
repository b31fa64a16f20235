package tests

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestBridgePostgres copies a table through a producer token limited to
// the bridge's prefixes, then follows every kind of change to a leaf:
// insert, update, an update of the key, an update leaving a large value
// unchanged, delete, truncate, and types mapped to JSON numbers,
// booleans, null and embedded JSON.
func TestBridgePostgres(t *testing.T) {
	_, _, dsn := newPGDatabase(t)
	pgExec(t, dsn, recordsTable,
		`INSERT INTO records SELECT 'r' || i, 'A', '10.0.0.' || i, 300, i % 2 = 0, i / 4.0, 9007199254740993, 0.5, '{"a":[1,2]}', NULL
		 FROM generate_series(1, 200) i`)
	dir := t.TempDir()
	token := filepath.Join(dir, "dns.token")
	entry, code := runQS(t, "token", "--name", "dns", "--prefix", "dns/", "--prefix", "_bridge/", "--out", token)
	if code != 0 {
		t.Fatalf("qs token: %s", entry)
	}
	producers := filepath.Join(dir, "producers.toml")
	writeAtomic(t, producers, entry)
	root := startQS(t, filepath.Join(dir, "root"), "--producers", producers)
	leaf := startQS(t, filepath.Join(dir, "leaf"), "--upstream", root.Addr["repl"])
	lc := leaf.client(t)

	b := startBridge(t, dir, "--dsn", dsn, "--table", "records", "--key-column", "name", "--prefix", "dns/",
		"--to", root.Addr["http"], "--token-file", token)
	waitSameRows(t, lc, dsn, "records", "name", "dns/")
	v, err := lc.Get(context.Background(), "dns/r4", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const want4 = `{"name":"r4","type":"A","content":"10.0.0.4","ttl":300,"enabled":true,"weight":1.00000000000000000000,"big":9007199254740993,"score":0.5,"data":{"a":[1,2]},"blob":null}`
	if string(v.Value) != want4 {
		t.Fatalf("row r4 is\n%s\nwant\n%s", v.Value, want4)
	}

	pgExec(t, dsn,
		`INSERT INTO records (name, type, content, ttl) VALUES ('new', 'AAAA', '::1', 60)`,
		`UPDATE records SET content = '10.9.9.9', ttl = NULL WHERE name = 'r1'`,
		`UPDATE records SET name = 'r2-renamed' WHERE name = 'r2'`,
		`DELETE FROM records WHERE name = 'r3'`,
		// A value stored out of line (TOAST), then an update of another column.
		`UPDATE records SET blob = (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i) WHERE name = 'r5'`,
		`UPDATE records SET ttl = 1 WHERE name = 'r5'`,
		`BEGIN; DELETE FROM records WHERE name = 'r6'; INSERT INTO records (name, type) VALUES ('r6', 'TXT'); COMMIT`,
	)
	waitSameRows(t, lc, dsn, "records", "name", "dns/")

	pgExec(t, dsn, `TRUNCATE records`, `INSERT INTO records (name, type) VALUES ('after-truncate', 'A')`)
	waitSameRows(t, lc, dsn, "records", "name", "dns/")
	if st, err := lc.Get(context.Background(), "_bridge/qs_records", client.ReadOptions{}); err != nil || !strings.Contains(string(st.Value), `"copied":true`) {
		t.Fatalf("state key: %q %v", st.Value, err)
	}
	metrics := httpGetBody(t, "http://"+b.Addr["metrics"]+"/metrics")
	for _, m := range []string{"qs_bridge_rows_copied_total 200", "qs_bridge_copy_complete 1", `qs_bridge_transactions_total{outcome="applied"}`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %q", m)
		}
	}
	b.stop()
}

// TestBridgePostgresTransactionsWhole writes transactions of many rows
// while a leaf's watcher reads: every transaction arrives as one index
// holding all its rows, never part of one.
func TestBridgePostgresTransactionsWhole(t *testing.T) {
	_, slot, dsn := newPGDatabase(t)
	pgExec(t, dsn, `CREATE TABLE cfg (id int PRIMARY KEY, version int NOT NULL)`,
		`INSERT INTO cfg SELECT i, 0 FROM generate_series(1, 20) i`)
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	leaf := startQS(t, filepath.Join(dir, "leaf"), "--upstream", root.Addr["repl"])
	startBridge(t, dir, "--dsn", dsn, "--table", "cfg", "--key-column", "id", "--prefix", "cfg/", "--to", root.Addr["http"], "--slot", slot)
	waitSameRows(t, leaf.client(t), dsn, "cfg", "id", "cfg/")
	events := watchAll(t, leaf.Addr["http"], "cfg/")
	const txns = 30
	for v := 1; v <= txns; v++ {
		pgExec(t, dsn, "UPDATE cfg SET version = "+strconv.Itoa(v))
	}
	// Every index holds one transaction: all 20 rows, one version.
	byIndex := map[uint64][]watchEvent{}
	lastDone := 0
	final := `"version":` + strconv.Itoa(txns) + `}`
	deadline := time.After(60 * time.Second)
	for lastDone < 20 {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("watch ended")
			}
			byIndex[e.Index] = append(byIndex[e.Index], e)
			if strings.HasSuffix(string(e.Value), final) {
				lastDone++
			}
		case <-deadline:
			t.Fatalf("the last transaction did not reach the leaf's watcher in 60s (%d of its rows)", lastDone)
		}
	}
	if len(byIndex) != txns+1 {
		t.Errorf("%d indexes for the copy and %d transactions", len(byIndex), txns)
	}
	for idx, evs := range byIndex {
		version := func(e watchEvent) string { v := string(e.Value); return v[strings.Index(v, `"version"`):] }
		if len(evs) != 20 {
			t.Fatalf("index %d holds %d of a transaction's 20 rows", idx, len(evs))
		}
		for _, e := range evs {
			if version(e) != version(evs[0]) {
				t.Fatalf("index %d mixes two transactions: %s and %s", idx, version(evs[0]), version(e))
			}
		}
	}
}
