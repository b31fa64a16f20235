// Package tests holds multi-process tests: they build the qs binary once and
// start real servers on 127.0.0.1 with kernel-chosen ports, in temporary
// directories, and always stop them.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

var qsBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "qs-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	qsBin = filepath.Join(dir, "qs")
	build := exec.Command("go", "build", "-tags", qsBuildTags, "-o", qsBin, "../cmd/qs")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build qs:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopSharedPostgres()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running qs process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	Dir  string
	Addr map[string]string // listener kind → address, from the announce lines
	out  *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var announceRE = regexp.MustCompile(`^(\w+) listening on (\S+)`)

// startQS runs `qs serve --data dir --http 127.0.0.1:0 --memcache 127.0.0.1:0
// extra...` and waits until every listener is announced.
func startQS(t *testing.T, dir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--log-level", "warn"}, extra...)
	return startCmd(t, dir, exec.Command(qsBin, args...), 3)
}

// startCmd starts cmd and waits for `want` announce lines on its stdout.
func startCmd(t *testing.T, dir string, cmd *exec.Cmd, want int) *proc {
	t.Helper()
	return startCmdWithin(t, dir, cmd, want, 30*time.Second)
}

// startCmdWithin is startCmd waiting up to limit for the announcements.
func startCmdWithin(t *testing.T, dir string, cmd *exec.Cmd, want int, limit time.Duration) *proc {
	t.Helper()
	p := &proc{t: t, cmd: cmd, Dir: dir, Addr: map[string]string{}, out: &syncBuffer{}, done: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.Write([]byte(sc.Text() + "\n"))
			select {
			case lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	deadline := time.After(limit)
	for len(p.Addr) < want {
		select {
		case l := <-lines:
			if m := announceRE.FindStringSubmatch(l); m != nil {
				p.Addr[m[1]] = m[2]
			}
		case <-p.done:
			t.Fatalf("qs exited before listening:\n%s", p.out.String())
		case <-deadline:
			p.kill()
			t.Fatalf("qs did not announce its listeners in %v:\n%s", limit, p.out.String())
		}
	}
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop asks for a graceful shutdown and fails the test if it takes too long.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		// SIGQUIT makes the Go runtime print every goroutine's stack
		// before it exits: where the shutdown hangs.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		p.kill()
		p.t.Fatalf("qs did not stop within 20s:\n%s", p.out.String())
	}
}

func (p *proc) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New([]string{p.Addr["http"]}, client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runQS runs a qs tool command to completion and returns its output and
// exit code.
func runQS(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return runQSTimeout(t, 2*time.Minute, args...)
}

// runQSTimeout is runQS with a time limit; a command still running then is
// killed and reported with exit code -1.
func runQSTimeout(t *testing.T, limit time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, qsBin, args...).CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("qs %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}
