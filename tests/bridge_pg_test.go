package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge/pgtest"
)

// One PostgreSQL cluster serves every test of the package; each test uses
// a database of its own.
var shared struct {
	once sync.Once
	pg   *pgtest.Cluster
	dir  string
	err  error
	n    int
	mu   sync.Mutex
}

func sharedPostgres(t *testing.T) *pgtest.Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "qs-pg-")
		if shared.err == nil {
			shared.pg, shared.err = pgtest.Start(shared.dir, "logical")
		}
	})
	if errors.Is(shared.err, pgtest.ErrNoPostgres) {
		t.Skip(shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.pg
}

// stopSharedPostgres stops the shared cluster, if a test started it.
func stopSharedPostgres() {
	if shared.pg != nil {
		shared.pg.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// newPGDatabase creates a database for this test alone and returns its name
// and DSN.
func newPGDatabase(t *testing.T) (*pgtest.Cluster, string, string) {
	t.Helper()
	pg := sharedPostgres(t)
	shared.mu.Lock()
	shared.n++
	name := fmt.Sprintf("t%d_%s", shared.n, nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"))
	shared.mu.Unlock()
	if len(name) > 60 {
		name = name[:60]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := pg.CreateDB(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return pg, name, dsn
}

func pgExec(t *testing.T, dsn string, sql ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, s := range sql {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

const recordsTable = `CREATE TABLE records (
	name text PRIMARY KEY, type text NOT NULL, content text, ttl integer, enabled boolean,
	weight numeric, big bigint, score double precision, data jsonb, blob text)`

// startBridge runs qs bridge postgres with args and waits for its metrics
// listener.
func startBridge(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	all := append([]string{"bridge", "postgres", "--metrics", "127.0.0.1:0", "--log-level", "warn"}, args...)
	p := startCmd(t, dir, execQS(all...), 1)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge output:\n%s", p.out.String())
		}
	})
	return p
}

// pgRows reads the table as the bridge should write it: key prefix+key
// column, value the row's JSON (row_to_json, decoded for comparison).
func pgRows(t *testing.T, dsn, table, keyCol, prefix string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s::text, row_to_json(t)::text FROM %s t", pgx.Identifier{keyCol}.Sanitize(), pgx.Identifier{table}.Sanitize()))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			t.Fatal(err)
		}
		out[prefix+k] = x
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// qsRows reads every key under prefix from c, values decoded as JSON.
func qsRows(c *client.Client, prefix string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]any{}
	start := prefix
	var at uint64
	for {
		page, err := c.Scan(ctx, prefix, start, 1000, client.ReadOptions{MinIndex: at})
		if err != nil {
			return nil, err
		}
		at = page.Index
		for _, it := range page.Items {
			var x any
			if err := json.Unmarshal(it.Value, &x); err != nil {
				return nil, fmt.Errorf("%s: %q is not JSON: %v", it.Key, it.Value, err)
			}
			out[it.Key] = x
		}
		if page.Next == nil {
			return out, nil
		}
		start = *page.Next
	}
}

// waitSameRows polls until c holds exactly the table's rows under prefix.
func waitSameRows(t *testing.T, c *client.Client, dsn, table, keyCol, prefix string) {
	t.Helper()
	want := pgRows(t, dsn, table, keyCol, prefix)
	deadline := time.Now().Add(60 * time.Second)
	var got map[string]any
	var err error
	for time.Now().Before(deadline) {
		if got, err = qsRows(c, prefix); err == nil && reflect.DeepEqual(got, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("qs does not hold the table after 60s (err %v):\n got %d keys %v\nwant %d keys %v", err, len(got), abbrev(got), len(want), abbrev(want))
}

func abbrev(m map[string]any) string {
	s := fmt.Sprint(m)
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return s
}

// watchEvent is one line of a watch stream.
type watchEvent struct {
	Index    uint64 `json:"index"`
	Key      string `json:"key"`
	Value    []byte `json:"value"`
	Deleted  bool   `json:"deleted"`
	Progress bool   `json:"progress"`
}

// watchAll streams the changes under prefix of the node at addr from
// index 0 into a channel until the test ends.
func watchAll(t *testing.T, addr, prefix string) <-chan watchEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/v1/default/watch?from_index=0&prefix="+prefix, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("watch: %s", resp.Status)
	}
	ch := make(chan watchEvent, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var e watchEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil && !e.Progress {
				ch <- e
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return ch
}

func execQS(args ...string) *exec.Cmd { return exec.Command(qsBin, args...) }

func httpGetBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
