package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrMemcachedNotFound is returned by FindMemcached.
var ErrMemcachedNotFound = errors.New("bench: memcached not found in PATH or at /usr/bin/memcached: install it (apt-get install memcached), pass --memcached-bin, or run without a baseline (--no-baseline)")

// stopGrace is how long a spawned server has to exit after SIGTERM before
// it is killed.
const stopGrace = 5 * time.Second

// Process is a server this run started, in a process group of its own.
// Its output is kept (the last 64 KiB) for error messages.
type Process struct {
	Name string
	cmd  *exec.Cmd
	out  *tailBuffer
	dir  string // removed by Stop, if set
	done chan struct{}
	err  error // the exit status; set before done is closed
	once sync.Once
}

func startProcess(name string, cmd *exec.Cmd, out *tailBuffer) (*Process, error) {
	setProcAttr(cmd)
	cmd.WaitDelay = time.Second // stop waiting for output pipes held by grandchildren
	if cmd.Stdout == nil {
		cmd.Stdout = out
	}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Output returns the end of what the process printed.
func (p *Process) Output() string { return p.out.String() }

// Exited returns nil while the process runs, and an error with its exit
// status and output once it has exited.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); its output:\n%s", p.Name, p.err, indent(p.Output()))
	default:
		return nil
	}
}

// Stop terminates the process group (SIGTERM, then SIGKILL after
// stopGrace), waits for the process and removes its data directory. It is
// safe to call more than once.
func (p *Process) Stop() error {
	var err error
	p.once.Do(func() {
		select {
		case <-p.done:
		default:
			_ = signalGroup(p.cmd.Process, false)
			t := time.NewTimer(stopGrace)
			select {
			case <-p.done:
			case <-t.C:
				_ = signalGroup(p.cmd.Process, true)
				<-p.done
			}
			t.Stop()
		}
		// Whatever the server left behind in its group goes too.
		_ = signalGroup(p.cmd.Process, true)
		if p.dir != "" {
			err = os.RemoveAll(p.dir)
		}
	})
	return err
}

// listenerRE matches the lines qs serve prints for its listeners, e.g.
// "memcache listening on 127.0.0.1:41234", anywhere in a log line.
var listenerRE = regexp.MustCompile(`(\w+) listening on (\S+)`)

// SpawnQS starts `bin serve --data <tmp> --http 127.0.0.1:0 --memcache
// 127.0.0.1:0` (with `--config config` first if config is not empty: the
// flags override the file) with its data in a new directory under workDir
// and waits, up to wait, for it to print both listeners. The returned
// target's process must be stopped with StopTarget.
func SpawnQS(ctx context.Context, bin, config, workDir string, wait time.Duration) (*Target, error) {
	t, _, err := spawnQSWith(ctx, bin, config, workDir, wait, "--repl", "off")
	return t, err
}

// spawnQSWith is SpawnQS with extra flags after the others; it also
// returns every listener qs printed (kind → address).
func spawnQSWith(ctx context.Context, bin, config, workDir string, wait time.Duration, extra ...string) (*Target, map[string]string, error) {
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("find the qs binary: %w (pass --qs-bin)", err)
		}
		bin = exe
	}
	dir, err := os.MkdirTemp(workDir, "qs-bench-")
	if err != nil {
		return nil, nil, err
	}
	out := &tailBuffer{max: 64 << 10}
	lw := newLineWatcher(out)
	args := []string{"serve"}
	if config != "" {
		args = append(args, "--config", config)
	}
	args = append(args, "--data", dir, "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0")
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = lw
	p, err := startProcess("qs serve", cmd, out)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	p.dir = dir
	t := &Target{Name: "qs", Spawned: true, proc: p}

	fail := func(err error) (*Target, map[string]string, error) {
		p.Stop()
		return nil, nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// A replication listener asked for is awaited too: it is announced
	// after the others.
	wantRepl := slices.ContainsFunc(extra, func(a string) bool { return a == "--repl" }) && !slices.Contains(extra, "off")
	var found map[string]string
	for {
		found = lw.listeners()
		if found["memcache"] != "" && found["http"] != "" && (!wantRepl || found["repl"] != "") {
			t.Memcache, t.HTTP = found["memcache"], found["http"]
			break
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-p.done:
			return fail(fmt.Errorf("%s exited before printing its listeners (%v); its output:\n%s", cmd, p.err, indent(p.Output())))
		case <-timer.C:
			return fail(fmt.Errorf("%s did not print \"http listening on ADDR\" and \"memcache listening on ADDR\" within %s (found %v); its output:\n%s",
				cmd, wait, found, indent(p.Output())))
		case <-lw.changed:
		}
	}
	if err := t.check(false); err != nil {
		return fail(err)
	}
	return t, found, nil
}

// FindMemcached returns bin if set, else memcached from PATH, else
// /usr/bin/memcached, else ErrMemcachedNotFound.
func FindMemcached(bin string) (string, error) {
	if bin != "" {
		if _, err := exec.LookPath(bin); err != nil {
			return "", fmt.Errorf("memcached binary %s: %w", bin, err)
		}
		return bin, nil
	}
	if p, err := exec.LookPath("memcached"); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath("/usr/bin/memcached"); err == nil {
		return "/usr/bin/memcached", nil
	}
	return "", ErrMemcachedNotFound
}

// SpawnMemcached starts memcached on a free loopback port, with memMB
// megabytes of memory, and waits up to wait for it to accept connections.
// If the port was taken in between, it tries another one.
func SpawnMemcached(ctx context.Context, bin string, memMB int, wait time.Duration) (*Target, error) {
	bin, err := FindMemcached(bin)
	if err != nil {
		return nil, err
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{"-p", strconv.Itoa(port), "-l", "127.0.0.1", "-U", "0", "-m", strconv.Itoa(memMB)}
		if os.Geteuid() == 0 {
			// memcached refuses to run as root without -u.
			u := "nobody"
			if _, err := user.Lookup(u); err != nil {
				u = "root"
			}
			args = append(args, "-u", u)
		}
		cmd := exec.Command(bin, args...)
		p, err := startProcess("memcached", cmd, &tailBuffer{max: 64 << 10})
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = waitListening(ctx, p, addr, wait)
		if err == nil {
			return &Target{Name: "memcached", Memcache: addr, Spawned: true, proc: p}, nil
		}
		p.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		out := p.Output()
		if attempt < attempts && (strings.Contains(out, "in use") || strings.Contains(out, "failed to listen")) {
			continue
		}
		return nil, fmt.Errorf("%s: %w; its output:\n%s", cmd, err, indent(out))
	}
}

// waitListening polls addr until it accepts a connection, the process
// exits, ctx ends or wait passes.
func waitListening(ctx context.Context, p *Process, addr string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections on %s after %s: %v", addr, wait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("exited (%v)", p.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StopTarget stops the target's process, if this run spawned it.
func StopTarget(t *Target) error {
	if t.proc == nil {
		return nil
	}
	return t.proc.Stop()
}

// lineWatcher passes a process's stdout on to out and records the
// listeners announced in it.
type lineWatcher struct {
	out     *tailBuffer
	changed chan struct{} // gets a token when the listeners change

	mu struct {
		sync.Mutex
		partial []byte            // the unfinished last line
		found   map[string]string // listener name -> address
	}
}

func newLineWatcher(out *tailBuffer) *lineWatcher {
	w := &lineWatcher{out: out, changed: make(chan struct{}, 1)}
	w.mu.found = map[string]string{}
	return w
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	w.out.Write(b)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.partial = append(w.mu.partial, b...)
	for {
		i := bytes.IndexByte(w.mu.partial, '\n')
		if i < 0 {
			break
		}
		w.lineLocked(w.mu.partial[:i])
		w.mu.partial = w.mu.partial[i+1:]
	}
	if len(w.mu.partial) > 4<<10 {
		// A line this long announces no listener; keep its tail only.
		w.mu.partial = append([]byte(nil), w.mu.partial[len(w.mu.partial)-256:]...)
	}
	return len(b), nil
}

func (w *lineWatcher) lineLocked(l []byte) {
	for _, m := range listenerRE.FindAllSubmatch(l, -1) {
		name := strings.ToLower(string(m[1]))
		if name == "memcached" || name == "mc" {
			name = "memcache"
		}
		addr := normalizeAddr(string(m[2]))
		if addr == "" {
			continue
		}
		w.mu.found[name] = addr
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

func (w *lineWatcher) listeners() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.mu.found))
	for k, v := range w.mu.found {
		out[k] = v
	}
	return out
}

// normalizeAddr turns what a server printed as its address into host:port
// to dial: it drops a scheme and trailing punctuation, and dials an
// unspecified host (0.0.0.0, ::) on 127.0.0.1. It returns "" if the text is
// not an address.
func normalizeAddr(s string) string {
	s = strings.TrimPrefix(s, "http://")
	s = strings.TrimPrefix(s, "tcp://")
	s = strings.TrimRight(s, ".,;:)/\"'")
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return ""
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// tailBuffer is an io.Writer that keeps the last max bytes written. Safe
// for concurrent use.
type tailBuffer struct {
	max int
	mu  struct {
		sync.Mutex
		b       []byte
		dropped bool
	}
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.b = append(t.mu.b, b...)
	if over := len(t.mu.b) - t.max; over > 0 {
		t.mu.b = append(t.mu.b[:0], t.mu.b[over:]...)
		t.mu.dropped = true
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.mu.b)
	if t.mu.dropped {
		s = "[...]\n" + s
	}
	if strings.TrimSpace(s) == "" {
		return "(no output)"
	}
	return s
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// tmpfsWarning returns a warning if dir is on tmpfs, where fsync costs
// nothing and durable-write numbers mean little.
func tmpfsWarning(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if onTmpfs(dir) {
		return fmt.Sprintf("the qs data directory is under %s, which is tmpfs: fsync is free there, so write latencies and throughput are not representative (use --work-dir on a real disk)", dir)
	}
	return ""
}
