//go:build qsfailpoints

package tests

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// The tests of this file need the failpoints, which only a qs built with
// the qsfailpoints tag has:
//
//	go test -tags qsfailpoints -run 'TestCutThroughFailpointIntermediateKilled' ./tests/

// TestCutThroughFailpointIntermediateKilled kills an intermediate (SIGKILL from a
// failpoint) right after it passed a verified batch to its leaf and
// before its own store made the batch durable. Restarted, it replays only
// what it made durable, so its leaf is ahead of it: the leaf is refused
// "ahead" while the intermediate cannot reach the root, waits without
// bootstrapping, and resumes once the intermediate caught up. All three
// end with the same data (digest) and every log verifies offline.
func TestCutThroughFailpointIntermediateKilled(t *testing.T) {
	root := startQS(t, t.TempDir())
	midDir := t.TempDir()
	cmd := exec.Command(qsBin, "serve", "--data", midDir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0",
		"--repl", "127.0.0.1:0", "--log-level", "warn", "--upstream", root.Addr["repl"])
	cmd.Env = append(os.Environ(), "QS_FAILPOINT=repl-forwarded:20")
	mid := startCmd(t, midDir, cmd, 3)
	midRepl := mid.Addr["repl"]
	leaf := startQS(t, t.TempDir(), "--upstream", midRepl)
	rc, lc := root.client(t), leaf.client(t)
	bg := context.Background()

	// Writes until the failpoint fires; the leaf follows from the start.
	first, err := rc.Put(bg, "first", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Digest(bg, client.ReadOptions{MinIndex: first.Index, Wait: 30 * time.Second}); err != nil {
		t.Fatalf("leaf never applied the first write: %v", err)
	}
	var last uint64
	for i := 0; i < 20000; i++ {
		select {
		case <-mid.done:
			i = 20000
			continue
		default:
		}
		res, err := rc.Put(bg, fmt.Sprint("k/", i%50), []byte(fmt.Sprint(i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Index
	}
	select {
	case <-mid.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the failpoint never fired")
	}
	out := mid.out.String()
	at := strings.Index(out, "failpoint repl-forwarded: killing")
	if at < 0 {
		t.Fatalf("intermediate died without the failpoint:\n%s", out)
	}
	var forwarded, durable uint64
	fmt.Sscanf(out[at:], "failpoint repl-forwarded: killing the process with entries forwarded up to %d, durable up to %d", &forwarded, &durable)
	if forwarded <= durable {
		t.Fatalf("failpoint: forwarded %d, durable %d: nothing was sent early", forwarded, durable)
	}
	// The leaf applied what it was sent; the intermediate's disk holds less.
	if _, err := lc.Digest(bg, client.ReadOptions{MinIndex: forwarded, Wait: 30 * time.Second}); err != nil {
		t.Fatalf("leaf never applied the forwarded entries up to %d: %v", forwarded, err)
	}
	t.Logf("killed with entries forwarded up to %d, durable up to %d; last write %d", forwarded, durable, last)

	// Restarted on the same address, first without a reachable root: it
	// holds what it made durable, nothing more, and its leaf is ahead of
	// it and must wait, not bootstrap.
	dead := deadAddr(t)
	mid = startQS(t, midDir, "--repl", midRepl, "--upstream", dead)
	restarted, err := scrapeMetric(mid.Addr["http"], `qs_store_applied_index{db="default"}`)
	if err != nil || uint64(restarted) < durable || uint64(restarted) >= forwarded {
		t.Fatalf("restarted intermediate holds %v (%v); durable before the kill %d, forwarded %d", restarted, err, durable, forwarded)
	}
	aheadSample := `qs_repl_client_refusals_total{code="ahead",db="default"}`
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := scrapeMetric(leaf.Addr["http"], aheadSample)
		if err == nil && v >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leaf was never refused ahead by its restarted source (%v, %v):\n%s", v, err, leaf.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	mid.stop()
	mid = startQS(t, midDir, "--repl", midRepl, "--upstream", root.Addr["repl"])

	end, err := rc.Put(bg, "the-end", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ro := client.ReadOptions{MinIndex: end.Index, Wait: 30 * time.Second}
	want, err := rc.Digest(bg, ro)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*proc{"intermediate": mid, "leaf": leaf} {
		got, err := p.client(t).Digest(bg, ro)
		if err != nil {
			t.Fatalf("%s digest: %v\n%s", name, err, p.out.String())
		}
		if got.SHA256 != want.SHA256 || got.Keys != want.Keys {
			t.Fatalf("%s serves other data: %+v, root %+v", name, got, want)
		}
		for _, sample := range []string{
			`qs_repl_errors_total{db="default",kind="gap"}`,
			`qs_repl_errors_total{db="default",kind="hash"}`,
			`qs_repl_errors_total{db="default",kind="apply"}`,
			`qs_repl_bootstraps_total{db="default",result="installed"}`,
		} {
			if v, err := scrapeMetric(p.Addr["http"], sample); err != nil || v != 0 {
				t.Fatalf("%s: %s = %v (%v)", name, sample, v, err)
			}
		}
	}
	leaf.stop()
	mid.stop()
	root.stop()
	for name, dir := range map[string]string{"root": root.Dir, "intermediate": midDir, "leaf": leaf.Dir} {
		if out, code := runQS(t, "verify", "--data", dir); code != 0 {
			t.Fatalf("qs verify of the %s: exit %d\n%s", name, code, out)
		}
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
