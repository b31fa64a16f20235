package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quicksilver-kv/qs/client"
)

// startEtcd runs a one-member etcd on loopback with free ports in a
// temporary directory, or skips the test when etcd is not installed.
func startEtcd(t *testing.T) (*clientv3.Client, string) {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (Debian: etcd-server); skipping the etcd bridge tests")
	}
	port := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	dir := t.TempDir()
	cu := fmt.Sprintf("http://127.0.0.1:%d", port())
	pu := fmt.Sprintf("http://127.0.0.1:%d", port())
	cmd := exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu, "--listen-peer-urls", pu,
		"--initial-advertise-peer-urls", pu, "--initial-cluster", "t="+pu, "--logger", "zap", "--log-level", "error")
	p := &proc{t: t, cmd: cmd, Dir: dir, Addr: map[string]string{}, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Get(ctx, "x")
		cancel()
		if err == nil {
			return cli, cu
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer in 60s: %v\n%s", err, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func etcdKVs(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func qsKVs(c *client.Client, prefix string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]string{}
	start := prefix
	for {
		page, err := c.Scan(ctx, prefix, start, 1000, client.ReadOptions{})
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			out[it.Key] = string(it.Value)
		}
		if page.Next == nil {
			return out, nil
		}
		start = *page.Next
	}
}

func waitSameKVs(t *testing.T, c *client.Client, cli *clientv3.Client, prefix string) {
	t.Helper()
	want := etcdKVs(t, cli, prefix)
	deadline := time.Now().Add(60 * time.Second)
	var got map[string]string
	var err error
	for time.Now().Before(deadline) {
		if got, err = qsKVs(c, prefix); err == nil && reflect.DeepEqual(got, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("qs does not hold etcd's keys after 60s (err %v):\n got %d keys\nwant %d keys", err, len(got), len(want))
}

// waitCopied waits for the bridge's state key to record a complete copy.
func waitCopied(t *testing.T, c *client.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		v, err := c.Get(ctx, key, client.ReadOptions{})
		cancel()
		var st struct{ Copied bool }
		if err == nil && json.Unmarshal(v.Value, &st) == nil && st.Copied {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the bridge stored no complete copy under %s after 60s", key)
}

func startEtcdBridge(t *testing.T, args ...string) *proc {
	t.Helper()
	all := append([]string{"bridge", "etcd", "--metrics", "127.0.0.1:0", "--log-level", "warn"}, args...)
	p := startCmd(t, t.TempDir(), execQS(all...), 1)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge output:\n%s", p.out.String())
		}
	})
	return p
}

// TestBridgeEtcd copies a prefix, follows puts, deletes and transactions
// (each one index at the leaf), survives kill -9 of the bridge while keys
// are written, and stores only growing revisions (nothing applied twice).
func TestBridgeEtcd(t *testing.T) {
	cli, ep := startEtcd(t)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("app/k%02d", i), fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	cli.Put(ctx, "other/x", "not copied")
	cli.Put(ctx, "app/empty", "")
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	leaf := startQS(t, filepath.Join(dir, "leaf"), "--upstream", root.Addr["repl"])
	lc := leaf.client(t)
	args := []string{"--endpoints", ep, "--prefix", "app/", "--to", root.Addr["http"]}
	b := startEtcdBridge(t, args...)
	waitSameKVs(t, lc, cli, "app/")
	if kv, _ := qsKVs(lc, "other/"); len(kv) != 0 {
		t.Fatalf("keys outside the prefix were copied: %v", kv)
	}
	events := watchAll(t, leaf.Addr["http"], "")

	// A transaction of three operations is one index.
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("app/t1", "1"), clientv3.OpPut("app/t2", "2"), clientv3.OpDelete("app/k00")).Commit(); err != nil {
		t.Fatal(err)
	}
	cli.Delete(ctx, "app/k01")
	waitSameKVs(t, lc, cli, "app/")

	// Writes stream while the bridge is killed and restarted.
	var written atomic.Int64
	stopc := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 300; i++ {
			select {
			case <-stopc:
				return
			default:
			}
			if _, err := cli.Put(ctx, fmt.Sprintf("app/w%03d", i), strconv.Itoa(i)); err != nil {
				return
			}
			written.Store(int64(i + 1))
		}
	}()
	defer func() { close(stopc); <-done }()
	for round := 1; round <= 3; round++ {
		for deadline := time.Now().Add(60 * time.Second); written.Load() < int64(round*75) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		b.kill()
		b = startEtcdBridge(t, args...)
	}
	for deadline := time.Now().Add(60 * time.Second); written.Load() < 300 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	waitSameKVs(t, lc, cli, "app/")
	b.stop()

	byIndex := map[uint64][]watchEvent{}
	var revs []int64
	sets := map[string]int{}
	for deadline := time.After(30 * time.Second); len(sets) < 300; {
		select {
		case e := <-events:
			byIndex[e.Index] = append(byIndex[e.Index], e)
			switch {
			case strings.HasPrefix(e.Key, "app/w"):
				sets[e.Key]++
			case e.Key == "_bridge/etcd/app/":
				var st struct{ Position string }
				json.Unmarshal(e.Value, &st)
				r, _ := strconv.ParseInt(st.Position, 10, 64)
				revs = append(revs, r)
			}
		case <-deadline:
			t.Fatalf("the watch saw %d of 300 keys", len(sets))
		}
	}
	for k, n := range sets {
		if n != 1 {
			t.Errorf("%s set %d times", k, n)
		}
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("stored revision went from %d to %d: a revision applied twice", revs[i-1], revs[i])
		}
	}
	var txnIndex []watchEvent
	for _, evs := range byIndex {
		for _, e := range evs {
			if e.Key == "app/t1" {
				txnIndex = evs
			}
		}
	}
	if len(txnIndex) != 4 { // three operations and the state key
		t.Fatalf("the transaction's index holds %+v", txnIndex)
	}
}

// TestBridgeEtcdCompacted: etcd compacted past the revision qs holds stops
// the bridge with an error naming the recovery; --resync recovers.
func TestBridgeEtcdCompacted(t *testing.T) {
	cli, ep := startEtcd(t)
	ctx := context.Background()
	cli.Put(ctx, "cfg/a", "1")
	cli.Put(ctx, "cfg/b", "2")
	root := startQS(t, t.TempDir())
	rc := root.client(t)
	args := []string{"--endpoints", ep, "--prefix", "cfg/", "--to", root.Addr["http"]}
	b := startEtcdBridge(t, args...)
	waitSameKVs(t, rc, cli, "cfg/")
	// The copy's keys are written before the batch that stores its
	// revision: killed between the two, the bridge would copy again.
	waitCopied(t, rc, "_bridge/etcd/cfg/")
	b.kill()
	cli.Delete(ctx, "cfg/a")
	resp, err := cli.Put(ctx, "cfg/c", "3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	out, code := runQSTimeout(t, 60*time.Second, append([]string{"bridge", "etcd"}, args...)...)
	if code == 0 || !strings.Contains(out, "etcd compacted its history past the revision stored in qs") || !strings.Contains(out, "--resync") {
		t.Fatalf("bridge after compaction exited %d:\n%s", code, out)
	}
	b = startEtcdBridge(t, append(args, "--resync")...)
	waitSameKVs(t, rc, cli, "cfg/")
	cli.Put(ctx, "cfg/d", "4")
	waitSameKVs(t, rc, cli, "cfg/")
	b.stop()
}
