package tests

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// startQSBridge runs `qs bridge qs --from from --to to` and waits for its
// metrics listener.
func startQSBridge(t *testing.T, from, to string) *proc {
	t.Helper()
	p := startCmd(t, t.TempDir(), execQS("bridge", "qs", "--from", from, "--to", to, "--metrics", "127.0.0.1:0", "--log-level", "warn"), 1)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge output:\n%s", p.out.String())
		}
	})
	return p
}

// dbIDOf is the database id a node's status names.
func dbIDOf(t *testing.T, p *proc) string {
	t.Helper()
	st, err := p.client(t).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id, _ := st["db_id"].(string)
	if len(id) != 32 {
		t.Fatalf("status has no db_id: %v", st)
	}
	return id
}

// sourceWriter writes one key per batch to c until stopped; it returns the
// number of acknowledged writes.
func sourceWriter(t *testing.T, c *client.Client, prefix string) (acked *atomic.Int64, stop func()) {
	acked = &atomic.Int64{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil && i < 100000; i++ {
			if _, err := c.Put(ctx, fmt.Sprintf("%s%06d", prefix, i), []byte(fmt.Sprint(i)), nil); err != nil {
				if ctx.Err() == nil {
					t.Errorf("write to the source: %v", err)
				}
				return
			}
			acked.Add(1)
		}
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return acked, stop
}

func waitAcked(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d writes acknowledged", n.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sameDigest waits until every node serves index or later, then checks
// they all serve the data of the first.
func sameDigest(t *testing.T, index uint64, nodes ...*proc) {
	t.Helper()
	// A write whose client gave up may still land after index: the
	// digests are compared once every node is at the same index.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ro := client.ReadOptions{MinIndex: index, Wait: 60 * time.Second}
		var ds []client.Digest
		for i, p := range nodes {
			d, err := p.client(t).Digest(context.Background(), ro)
			if err != nil {
				t.Fatalf("node %d digest: %v\n%s", i, err, p.out.String())
			}
			ds = append(ds, d)
		}
		at := ds[0].Index
		for _, d := range ds[1:] {
			at = max(at, d.Index)
		}
		if slices.ContainsFunc(ds, func(d client.Digest) bool { return d.Index != at }) && time.Now().Before(deadline) {
			index = at
			continue
		}
		for i, d := range ds[1:] {
			if d.Index != ds[0].Index || d.SHA256 != ds[0].SHA256 || d.Keys != ds[0].Keys {
				t.Fatalf("node %d serves other data: %+v, first %+v", i+1, d, ds[0])
			}
		}
		return
	}
}

// sameLogs checks the bridged root's stopped store holds the source's log:
// the same entries at the same indexes with the same hashes, no more.
func sameLogs(t *testing.T, source, bridged []wal.Entry) {
	t.Helper()
	if len(bridged) == 0 || len(bridged) > len(source) {
		t.Fatalf("the bridged root holds %d entries, the source %d", len(bridged), len(source))
	}
	if bridged[0].Index != source[0].Index {
		t.Fatalf("logs start at %d and %d", source[0].Index, bridged[0].Index)
	}
	for i := range bridged {
		if bridged[i].Index != source[i].Index || bridged[i].Hash != source[i].Hash {
			t.Fatalf("entry %d: bridged %d %x, source %d %x", i, bridged[i].Index, bridged[i].Hash[:6], source[i].Index, source[i].Hash[:6])
		}
	}
}

// TestBridgeQS: a bridged root follows the source's log verbatim while the
// source takes writes, the bridge is killed with SIGKILL twice mid-stream
// and the bridged root once; it refuses ordinary writes and writes no heartbeats; a leaf
// moves from the source root to the bridged root and back without a
// bootstrap, serving the same data throughout.
func TestBridgeQS(t *testing.T) {
	dir := t.TempDir()
	src := startQS(t, filepath.Join(dir, "source"))
	id := dbIDOf(t, src)
	dst := startQS(t, filepath.Join(dir, "bridged"), "--bridged", id)
	leafDir := filepath.Join(dir, "leaf")
	leaf := startQS(t, leafDir, "--upstream", src.Addr["repl"])

	acked, stop := sourceWriter(t, src.client(t), "k/")
	b := startQSBridge(t, src.Addr["repl"], dst.Addr["http"])
	for round := 1; round <= 2; round++ {
		waitAcked(t, acked, int64(round*150))
		b.kill()
		waitAcked(t, acked, int64(round*150+50)) // the source goes on while no bridge runs
		b = startQSBridge(t, src.Addr["repl"], dst.Addr["http"])
	}
	// The bridged root is killed too, and comes back on the same address:
	// the bridge goes on from its durable head.
	dst.kill()
	waitAcked(t, acked, 450)
	dst = startQS(t, filepath.Join(dir, "bridged"), "--bridged", id, "--http", dst.Addr["http"])
	waitAcked(t, acked, 500)

	// Ordinary writes are refused, with an error naming the bridge.
	_, err := dst.client(t).Put(context.Background(), "k/own", []byte("x"), nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "not_root" || !strings.Contains(ce.Message, "bridge") {
		t.Fatalf("a write to the bridged root: %v, want not_root naming the bridge", err)
	}
	if v := readMetric(t, dst.Addr["http"], `qs_http_errors_total{kind="not_root"}`); v < 1 {
		t.Fatalf("the refused write was not counted: %v", v)
	}

	// The leaf moves to the bridged root, follows it, and moves back.
	stop()
	last, err := src.client(t).Put(context.Background(), "k/last", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sameDigest(t, last.Index, src, dst, leaf)
	leaf.stop()
	leaf = startQS(t, leafDir, "--upstream", dst.Addr["repl"])
	acked, stop = sourceWriter(t, src.client(t), "m/")
	waitAcked(t, acked, 100)
	stop()
	if last, err = src.client(t).Put(context.Background(), "m/last", []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	sameDigest(t, last.Index, src, dst, leaf)
	noBootstrap(t, leaf)
	leaf.stop()
	leaf = startQS(t, leafDir, "--upstream", src.Addr["repl"])
	if last, err = src.client(t).Put(context.Background(), "n/last", []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	sameDigest(t, last.Index, src, dst, leaf)
	noBootstrap(t, leaf)
	if v := readMetric(t, b.Addr["metrics"], `qs_bridge_errors_total{kind="diverged"}`); v != 0 {
		t.Fatalf("the bridge counted %v divergences", v)
	}

	// The logs of the stopped stores: the bridged root holds the source's
	// entries, its heartbeats included, and none of its own.
	b.stop()
	leaf.stop()
	dst.stop()
	src.stop()
	srcLog, _, srcDigest := storeLog(t, filepath.Join(dir, "source"))
	dstLog, _, dstDigest := storeLog(t, filepath.Join(dir, "bridged"))
	sameLogs(t, srcLog, dstLog)
	if srcDigest.Hash != dstDigest.Hash {
		t.Fatalf("stopped stores: digests %x and %x", srcDigest.Hash[:6], dstDigest.Hash[:6])
	}
}

// noBootstrap checks a replica followed its source's log: no snapshot
// installed, no entry refused.
func noBootstrap(t *testing.T, p *proc) {
	t.Helper()
	for _, sample := range []string{
		`qs_repl_bootstraps_total{db="default",result="installed"}`,
		`qs_repl_errors_total{db="default",kind="hash"}`,
		`qs_repl_errors_total{db="default",kind="gap"}`,
		`qs_repl_errors_total{db="default",kind="apply"}`,
	} {
		if v, err := scrapeMetric(p.Addr["http"], sample); err != nil || v != 0 {
			t.Fatalf("replica: %s = %v (%v)", sample, v, err)
		}
	}
}

// TestBridgeQSFromAReplica: a source that no longer holds its whole log
// refuses an empty bridged root (the bridge stops, saying why); a full
// replica's data directory started bridged is followed from its head.
func TestBridgeQSFromAReplica(t *testing.T) {
	dir := t.TempDir()
	// The source keeps 50 entries: the first 100 puts are gone from its log
	// (an empty root cannot be bridged), and the replica, restarted as a
	// bridged root, still finds its next entry after the root's heartbeats
	// of a slow restart (about one a second).
	src := startQS(t, filepath.Join(dir, "source"), "--config", writeConfig(t, dir, "[[database]]\nname = \"default\"\nretain_entries = 50\n"))
	id := dbIDOf(t, src)
	repDir := filepath.Join(dir, "replica")
	rep := startQS(t, repDir, "--upstream", src.Addr["repl"])
	sc := src.client(t)
	var last client.WriteResult
	for i := range 100 {
		var err error
		if last, err = sc.Put(context.Background(), fmt.Sprintf("k/%03d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	sameDigest(t, last.Index, src, rep)

	empty := startQS(t, filepath.Join(dir, "empty"), "--bridged", id)
	out, code := runQSTimeout(t, 60*time.Second, "bridge", "qs", "--from", src.Addr["repl"], "--to", empty.Addr["http"], "--log-level", "warn")
	if code <= 0 || !strings.Contains(out, "no longer holds its log") {
		t.Fatalf("a bridge into an empty root while the source's log is truncated: exit %d\n%s", code, out)
	}

	rep.stop()
	rep = startQS(t, repDir, "--bridged", id)
	startQSBridge(t, src.Addr["repl"], rep.Addr["http"])
	for i := range 100 {
		var err error
		if last, err = sc.Put(context.Background(), fmt.Sprintf("m/%03d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	sameDigest(t, last.Index, src, rep)
}
