package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/version"
)

// TestCLIHelpAndUsageErrors: help asked for exits 0; an unknown command or
// flag, or missing or extra arguments, exit 2 and the message is printed
// once.
func TestCLIHelpAndUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		once string // printed exactly once, if set
	}{
		{[]string{"--help"}, 0, "usage: qs <command>"},
		{[]string{"-h"}, 0, "usage: qs <command>"},
		{[]string{"help"}, 0, "usage: qs <command>"},
		{[]string{"get", "-h"}, 0, "-min-index"},
		{[]string{}, 2, "usage: qs <command>"},
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"get", "--bogus", "k"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"serve", "--http"}, 2, "flag needs an argument: -http"},
		{[]string{"bridge", "postgres", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"bridge", "etcd", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"version"}, 0, "qs " + version.Version + " ("},
		// Missing or extra arguments are usage errors too.
		{[]string{"get"}, 2, "usage: qs get [flags] KEY"},
		{[]string{"put", "k"}, 2, "usage: qs put [flags] KEY VALUE|-"},
		{[]string{"version", "extra"}, 2, "usage: qs version"},
		{[]string{"cert"}, 2, "usage:"},
		{[]string{"cert", "nosuch"}, 2, `unknown subcommand "nosuch"`},
		{[]string{"bridge"}, 2, "usage: qs bridge"},
		{[]string{"bridge", "nosuch"}, 2, `unknown bridge source "nosuch"`},
		{[]string{"raft"}, 2, "usage: qs raft"},
		{[]string{"usage", "--window", "1h"}, 2, "--window and --limit go with --unread"},
	} {
		out, code := runQS(t, c.args...)
		if code != c.code || strings.Count(out, c.once) != 1 {
			t.Errorf("qs %s: exit %d (want %d), %q printed %d times (want once):\n%s",
				strings.Join(c.args, " "), code, c.code, c.once, strings.Count(out, c.once), out)
		}
	}
}

// TestServeOnLockedDataDir: a second serve on the same data directory
// says that another process holds it, and which.
func TestServeOnLockedDataDir(t *testing.T) {
	dir := t.TempDir()
	root := startQS(t, dir)
	out, code := runQS(t, "serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--log-level", "error")
	want := fmt.Sprintf("data directory in use (locked by process %d", root.cmd.Process.Pid)
	if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "resource temporarily unavailable") {
		t.Fatalf("second serve on %s: exit %d, want 1 and %q:\n%s", dir, code, want, out)
	}
	// The first server still serves its data.
	if _, err := root.client(t).Put(context.Background(), "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	root.stop()
}

// TestCLIWriteToReplica: a write sent to a replica fails once, with a
// message saying it is a replica and naming the root's HTTP address.
func TestCLIWriteToReplica(t *testing.T) {
	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	rep := startQS(t, filepath.Join(dir, "rep"), "--upstream", root.Addr["repl"])
	pollFor(t, "the replica to learn the root's address", func() bool {
		st, err := rep.client(t).Status(context.Background())
		rh, _ := st["root_http"].([]any)
		return err == nil && len(rh) == 1 && rh[0] == root.Addr["http"]
	})
	out, code := runQS(t, "put", "--addr", rep.Addr["http"], "k", "v")
	if code != 1 || strings.Count(out, "is a replica on this node") != 1 ||
		strings.Count(out, "send writes to its root at http://"+root.Addr["http"]) != 1 {
		t.Fatalf("put to a replica: exit %d:\n%s", code, out)
	}
	rep.stop()
	root.stop()
}

// TestCLIGetPipedIsRaw: qs get writes the value's bytes as stored when
// its output is not a terminal (no newline added).
func TestCLIGetPipedIsRaw(t *testing.T) {
	root := startQS(t, t.TempDir())
	for _, v := range []string{"no newline", "one newline\n"} {
		if out, code := runQS(t, "put", "--addr", root.Addr["http"], "k", v); code != 0 {
			t.Fatalf("put: %d %s", code, out)
		}
		cmd := exec.Command(qsBin, "get", "--addr", root.Addr["http"], "k")
		got, err := cmd.Output()
		if err != nil || string(got) != v {
			t.Fatalf("qs get | ...: %q %v, want %q", got, err, v)
		}
	}
	root.stop()
}

// TestREADMEMemcachedLineEnds sends the README's nc line to a real
// server: the connection must close after the answer (it used to stay
// open until the idle timeout).
func TestREADMEMemcachedLineEnds(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`printf '([^']*)' \| nc 127\.0\.0\.1 7311`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README has no `printf '...' | nc 127.0.0.1 7311` line")
	}
	req := strings.NewReplacer(`\r`, "\r", `\n`, "\n").Replace(string(m[1]))
	root := startQS(t, t.TempDir())
	if out, code := runQS(t, "put", "--addr", root.Addr["http"], "greeting", "hello"); code != 0 {
		t.Fatalf("put: %d %s", code, out)
	}
	c, err := net.Dial("tcp", root.Addr["memcache"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Generous: the bug was a 5-minute wait for the idle timeout.
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("connection did not close after the README's request %q: %v (read %q)", req, err, got)
	}
	if !strings.Contains(string(got), "VALUE greeting 0 5\r\nhello\r\nEND\r\n") {
		t.Fatalf("answer %q", got)
	}
	root.stop()
}
