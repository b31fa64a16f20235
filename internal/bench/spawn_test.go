package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary plays `qs serve` when fakeServeEnv is set (TestMain).

func spawnFakeQS(t *testing.T, mode string, wait time.Duration) (*Target, string, error) {
	t.Helper()
	t.Setenv(fakeServeEnv, mode)
	dir := t.TempDir()
	tg, err := SpawnQS(context.Background(), os.Args[0], "", dir, wait)
	return tg, dir, err
}

func checkStopped(t *testing.T, p *Process, workDir string) {
	t.Helper()
	if p.Exited() == nil {
		t.Errorf("%s still running", p.Name)
	}
	if err := syscall.Kill(p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s: pid %d: %v, want ESRCH", p.Name, p.cmd.Process.Pid, err)
	}
	if workDir != "" {
		if ents, _ := os.ReadDir(workDir); len(ents) != 0 {
			t.Errorf("data directory not removed: %v", ents)
		}
	}
}

func TestSpawnQS(t *testing.T) {
	tg, dir, err := spawnFakeQS(t, "ok", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !isLoopback(tg.Memcache) || !isLoopback(tg.HTTP) || tg.Name != "qs" || !tg.Spawned {
		t.Fatalf("target %+v", tg)
	}
	err = withConn(context.Background(), tg.Memcache, time.Second, func(c *mcConn) error {
		if err := c.set("k", []byte("v")); err != nil {
			return err
		}
		_, found, err := c.getOne("k")
		if !found && err == nil {
			err = errMiss
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.alive(); err != nil {
		t.Fatal(err)
	}
	if err := StopTarget(tg); err != nil {
		t.Fatal(err)
	}
	checkStopped(t, tg.proc, dir)
	if tg.alive() == nil {
		t.Error("alive after Stop")
	}
	if err := StopTarget(tg); err != nil { // twice is fine
		t.Fatal(err)
	}
}

func TestSpawnQSFailures(t *testing.T) {
	_, dir, err := spawnFakeQS(t, "exit", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), "starting") ||
		!strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("exiting server: err %v, want its exit status and output", err)
	}
	checkEmpty(t, dir)

	start := time.Now()
	_, dir, err = spawnFakeQS(t, "silent", 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not print") || !strings.Contains(err.Error(), "(no output)") {
		t.Errorf("silent server: err %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("took %s to give up and stop it", d)
	}
	checkEmpty(t, dir)

	_, dir, err = spawnFakeQS(t, "mconly", 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "map[memcache:127.0.0.1:") || !strings.Contains(err.Error(), "unix listening on") {
		t.Errorf("server without http: err %v", err)
	}
	checkEmpty(t, dir)

	_, err = SpawnQS(context.Background(), "/nonexistent/qs", "", t.TempDir(), time.Second)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/qs") {
		t.Errorf("missing binary: err %v", err)
	}
}

func checkEmpty(t *testing.T, dir string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%s not cleaned up: %v", dir, ents)
	}
}

func TestSpawnCanceled(t *testing.T) {
	t.Setenv(fakeServeEnv, "silent")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	dir := t.TempDir()
	_, err := SpawnQS(ctx, os.Args[0], "", dir, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v", err)
	}
	checkEmpty(t, dir)
}

func TestSpawnMemcached(t *testing.T) {
	if _, err := FindMemcached(""); err != nil {
		t.Skip(err)
	}
	tg, err := SpawnMemcached(context.Background(), "", 64, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer StopTarget(tg)
	err = withConn(context.Background(), tg.Memcache, time.Second, func(c *mcConn) error {
		if err := c.set("k", []byte("v")); err != nil {
			return err
		}
		v, found, err := c.getOne("k")
		if err == nil && (!found || string(v) != "v") {
			err = errBadValue
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := StopTarget(tg); err != nil {
		t.Fatal(err)
	}
	checkStopped(t, tg.proc, "")
	if c, err := net.DialTimeout("tcp", tg.Memcache, time.Second); err == nil {
		c.Close()
		t.Error("memcached still accepts connections after Stop")
	}
}

func TestFindMemcached(t *testing.T) {
	if _, err := FindMemcached("/nonexistent/memcached"); err == nil {
		t.Error("found a nonexistent binary")
	}
	if _, err := os.Stat("/usr/bin/memcached"); err == nil {
		t.Skip("/usr/bin/memcached exists")
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := FindMemcached(""); !errors.Is(err, ErrMemcachedNotFound) || !strings.Contains(err.Error(), "apt-get install memcached") {
		t.Errorf("err %v", err)
	}
}

// TestRunSpawn runs the whole spawn path: a fake qs (this test binary) and,
// if installed, the real memcached as the baseline.
func TestRunSpawn(t *testing.T) {
	defer checkNoLeaks(t)
	t.Setenv(fakeServeEnv, "ok")
	cfg := testConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.ReadLatWriters = []int{0, 1}
	cfg.Scenarios = []string{"readlat", "write"}
	cfg.Spawn = true
	cfg.QSBin = os.Args[0]
	cfg.WorkDir = t.TempDir()
	cfg.MemcachedMemMB = 64
	_, err := FindMemcached("")
	withBaseline := err == nil
	cfg.NoBaseline = !withBaseline
	if !withBaseline {
		t.Logf("without the memcached baseline: %v", err)
	}
	rep, err := Run(context.Background(), cfg, "qs bench --spawn", testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, cfg.WorkDir)
	if rep.Errors() != 0 {
		t.Errorf("%d errors", rep.Errors())
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results", len(rep.Results))
	}
	rl, wr := rep.Results[0], rep.Results[1]
	wantTargets := 1
	if withBaseline {
		wantTargets = 2
	}
	if len(rep.Targets) != wantTargets || rep.Targets[0].Name != "qs" {
		t.Fatalf("targets %+v", rep.Targets)
	}
	if len(rl.Phases) != 2*wantTargets || len(wr.Phases) != 2 {
		t.Errorf("readlat %d phases, write %d phases", len(rl.Phases), len(wr.Phases))
	}
	// Fresh servers for each scenario: new ports.
	if rl.Targets[0].Memcache == wr.Targets[0].Memcache {
		t.Errorf("qs was not restarted between scenarios: %s", rl.Targets[0].Memcache)
	}
	if withBaseline {
		mc := rep.Targets[1]
		if mc.Name != "memcached" || !mc.Baseline || !strings.HasPrefix(mc.Version, "1.") {
			t.Errorf("baseline %+v", mc)
		}
		if len(rl.Ratios) != 3 {
			t.Errorf("ratios %+v", rl.Ratios)
		}
		if len(wr.Notes) == 0 || !strings.Contains(wr.Notes[0], "memcached: skipped: no http address") {
			t.Errorf("write notes %q", wr.Notes)
		}
	}
	for _, res := range rep.Results {
		for _, tg := range res.Targets {
			if tg.proc != nil {
				checkStopped(t, tg.proc, "")
			}
		}
		for _, ph := range res.Phases {
			if runtime.GOOS == "linux" && (ph.CPU.Machine <= 0 || ph.CPU.Client <= 0 || ph.CPU.Ops <= 0) {
				t.Errorf("%s %s on %s: CPU not measured: %+v", res.Scenario, ph.Name, ph.Target, ph.CPU)
			}
			if ph.DiskSyncMicros <= 0 {
				t.Errorf("%s %s on %s: disk fsync not probed", res.Scenario, ph.Name, ph.Target)
			}
		}
	}
}

func TestUnreachableTarget(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Scenarios = []string{"readlat", "get"}
	cfg.Targets = []Target{{Name: "gone", Memcache: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}}
	rep, err := Run(context.Background(), cfg, "qs bench", testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failures() != 2 || !strings.Contains(rep.Results[0].Failures[0], "connection refused") {
		t.Errorf("failures %d: %q", rep.Failures(), rep.Results[0].Failures)
	}
	var buf strings.Builder
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "FAILED: gone: loading the 20 keys") {
		t.Errorf("report does not show the failure:\n%s", buf.String())
	}
}

// TestServerDiesMidRun: a spawned server that dies is reported, its
// requests fail, and the following phases leave it out.
func TestServerDiesMidRun(t *testing.T) {
	defer checkNoLeaks(t)
	tg, _, err := spawnFakeQS(t, "ok", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer StopTarget(tg)
	cfg := testConfig()
	cfg.Duration = 400 * time.Millisecond
	cfg.Slices = 1 // the phase the server dies in is reported with its errors
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		t.Log(msg)
		if strings.HasSuffix(msg, "1 writer on qs for 400ms") {
			// Between the liveness check and the phase.
			syscall.Kill(tg.proc.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	res, err := ReadLat(context.Background(), cfg, []*Target{tg}, logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 || res.Phases[0].Errors != 0 || res.Phases[1].Errors == 0 {
		t.Fatalf("phases %+v: want errors in the second only", res.Phases)
	}
	if len(res.Failures) != 0 {
		t.Fatalf("failures %q before the next phase", res.Failures)
	}
	cfg.ReadLatWriters = []int{0}
	res, err = ReadLat(context.Background(), cfg, []*Target{tg}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 0 || len(res.Failures) != 1 || !strings.Contains(res.Failures[0], "qs serve exited (signal: killed)") {
		t.Errorf("phases %+v failures %q: want a failure", res.Phases, res.Failures)
	}
}

// TestSpawnQSConfig: the configuration file reaches the spawned qs.
func TestSpawnQSConfig(t *testing.T) {
	t.Setenv(fakeServeEnv, "ok")
	cfg := filepath.Join(t.TempDir(), "qs.toml")
	if err := os.WriteFile(cfg, []byte("memcache_read_nice = -5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tg, err := SpawnQS(context.Background(), os.Args[0], cfg, t.TempDir(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	StopTarget(tg)
	_, err = SpawnQS(context.Background(), os.Args[0], cfg+".missing", t.TempDir(), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "config") {
		t.Fatalf("spawn with a missing config file: %v, want the fake's complaint about it", err)
	}
}

// A replication listener asked for is awaited: qs prints it after the
// others, and a chain's next hop needs its address.
func TestSpawnQSWaitsForTheReplicationListener(t *testing.T) {
	t.Setenv(fakeServeEnv, "ok")
	tg, found, err := spawnQSWith(context.Background(), os.Args[0], "", t.TempDir(), 10*time.Second, "--repl", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer StopTarget(tg)
	if found["repl"] != "127.0.0.1:1" || tg.Memcache == "" || tg.HTTP == "" {
		t.Fatalf("listeners %v, target %+v", found, tg)
	}
}
