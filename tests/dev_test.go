package tests

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// devNodes is the number of nodes of qs dev: the tree (root, 2
// intermediates, 4 leaves, a proxy) and its data centre (a relay, 3
// proxies).
const devNodes = 12

// devTree is a running qs dev.
type devTree struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	out    *syncBuffer
	done   chan struct{}
	pids   []int
	diskMB float64
}

var devDiskRE = regexp.MustCompile(`^Disk: ([0-9.]+) MiB`)

// startDev runs qs dev on data with kernel-chosen ports (the root's HTTP
// address given) and waits until every node is up.
func startDev(t *testing.T, data, rootHTTP string) *devTree {
	t.Helper()
	d := &devTree{out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(qsBin, "dev", "--data", data, "--http", rootHTTP, "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--every", "200ms")
	var err error
	if d.stdout, err = d.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		for _, pid := range d.pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(d.stdout)
		for sc.Scan() {
			d.out.Write([]byte(sc.Text() + "\n"))
			if m := devDiskRE.FindStringSubmatch(sc.Text()); m != nil {
				lines <- m[1]
				return
			}
		}
		close(lines)
	}()
	select {
	case mb, ok := <-lines:
		if !ok {
			t.Fatalf("qs dev ended before its tree was up:\n%s", d.out.String())
		}
		d.diskMB, _ = strconv.ParseFloat(mb, 64)
	case <-time.After(3 * time.Minute):
		t.Fatalf("qs dev's tree not up within 3 minutes:\n%s", d.out.String())
	}
	raw, err := os.ReadFile(filepath.Join(data, "qs-dev.pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(raw)) {
		pid, _ := strconv.Atoi(f)
		d.pids = append(d.pids, pid)
	}
	if len(d.pids) != devNodes {
		t.Fatalf("pid file lists %d nodes, want %d: %q", len(d.pids), devNodes, raw)
	}
	return d
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i+2 < len(st) && st[i+2] != 'Z'
}

// waitNodesGone fails the test unless every node exits within a minute.
func (d *devTree) waitNodesGone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, pid := range d.pids {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("node pid %d still running a minute after qs dev ended:\n%s", pid, d.out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestDevStopsItsNodesWhenItDies: whichever way qs dev ends — killed, its
// terminal closed, its reader gone — no node outlives it.
func TestDevStopsItsNodesWhenItDies(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(d *devTree)
	}{
		{"SIGKILL", func(d *devTree) { d.cmd.Process.Signal(syscall.SIGKILL) }},
		{"SIGHUP", func(d *devTree) { d.cmd.Process.Signal(syscall.SIGHUP) }},
		{"SIGPIPE", func(d *devTree) { d.stdout.Close() }}, // as in qs dev | head
	} {
		t.Run(c.name, func(t *testing.T) {
			d := startDev(t, t.TempDir(), "127.0.0.1:0")
			// A node takes its ballast and, once written to, the storage
			// engine's preallocated log (about 18 MiB): whether the first
			// writes came before the report depends on the machine's load.
			if perNode := d.diskMB / float64(len(d.pids)); d.diskMB <= 0 || perNode > 32 {
				t.Errorf("qs dev reports %.1f MiB on disk for %d nodes, want (0, 32] a node", d.diskMB, len(d.pids))
			}
			c.end(d)
			select {
			case <-d.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("qs dev still running a minute after %s", c.name)
			}
			d.waitNodesGone(t)
		})
	}
}

// TestDevStopsAStaleTree: a qs serve left running in the data directory
// by an earlier qs dev (holding the root's address and data) is stopped
// by the next qs dev, which then starts.
func TestDevStopsAStaleTree(t *testing.T) {
	data := t.TempDir()
	rootHTTP := freeAddr(t)
	stale := startQS(t, filepath.Join(data, "root"), "--http", rootHTTP)
	if err := os.WriteFile(filepath.Join(data, "qs-dev.pids"), []byte(fmt.Sprintln(stale.cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, data, rootHTTP)
	select {
	case <-stale.done:
	default:
		t.Fatal("the stale root still runs while the new tree is up")
	}
	if !strings.Contains(d.out.String(), "stopped 1 qs serve process a previous qs dev left running") {
		t.Errorf("qs dev did not say it stopped the stale tree:\n%s", d.out.String())
	}
	d.cmd.Process.Signal(syscall.SIGINT)
	<-d.done
	d.waitNodesGone(t)
}

var devDCProxyRE = regexp.MustCompile(`(?m)^dc1-p1\s+http (\S+)`)

// TestDevDataCentreServesARead: qs dev starts its data centre beside the
// tree, says where its nodes are, and a key written at the root is read
// through a proxy of that data centre.
func TestDevDataCentreServesARead(t *testing.T) {
	rootHTTP := freeAddr(t)
	d := startDev(t, t.TempDir(), rootHTTP)
	m := devDCProxyRE.FindStringSubmatch(d.out.String())
	if m == nil {
		t.Fatalf("qs dev printed no address for dc1-p1:\n%s", d.out.String())
	}
	proxy := m[1]
	for _, want := range []string{"relay of dc1 fetching from leaf3, leaf4", "proxy of dc1 fetching through dc1-relay", "/v1/default/status"} {
		if !strings.Contains(d.out.String(), want) {
			t.Errorf("qs dev did not print %q:\n%s", want, d.out.String())
		}
	}
	if out, code := runQS(t, "put", "--addr", rootHTTP, "greeting", "hello"); code != 0 {
		t.Fatalf("put: %d %s", code, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, code := runQS(t, "get", "--addr", proxy, "greeting")
		if code == 0 && strings.TrimSpace(out) == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dc1-p1 did not answer hello within 60s: %d %s", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The status page it names is the root's, showing the tree.
	page := "http://" + rootHTTP + "/"
	if !strings.Contains(d.out.String(), "\n  "+page+"\n") {
		t.Errorf("qs dev did not print the status page %s:\n%s", page, d.out.String())
	}
	if body := httpGetBody(t, page); !strings.Contains(body, "<title>qs status</title>") {
		t.Errorf("GET %s is not the status page:\n%.300s", page, body)
	}
	// The proxy's status shows its shard of the data centre.
	out, code := runQS(t, "status", "--addr", proxy)
	if code != 0 || !strings.Contains(out, "shard") {
		t.Errorf("status of dc1-p1: %d %s", code, out)
	}
	d.cmd.Process.Signal(syscall.SIGINT)
	<-d.done
	d.waitNodesGone(t)
}
