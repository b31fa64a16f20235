package tests

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestSocketActivationRestartDropsNothing passes listening sockets to qs the
// way systemd does (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES), restarts the
// process twice while a client keeps opening new connections, and checks
// that no connection attempt failed: the kernel queues them on the socket
// while no process accepts.
func TestSocketActivationRestartDropsNothing(t *testing.T) {
	dir := t.TempDir()
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer httpLn.Close()
	mcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mcLn.Close()
	httpFile, _ := httpLn.(*net.TCPListener).File()
	mcFile, _ := mcLn.(*net.TCPListener).File()
	defer httpFile.Close()
	defer mcFile.Close()

	start := func() *proc {
		// LISTEN_PID must be the server's own pid: sh sets it to $$ and
		// exec keeps that pid.
		cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, qsBin, "serve", "--data", dir, "--repl", "127.0.0.1:0", "--log-level", "warn")
		cmd.Env = append(os.Environ(), "LISTEN_FDS=2", "LISTEN_FDNAMES=http:memcache-default")
		cmd.ExtraFiles = []*os.File{httpFile, mcFile}
		p := startCmd(t, dir, cmd, 3)
		if p.Addr["http"] != httpLn.Addr().String() || p.Addr["memcache"] != mcLn.Addr().String() {
			t.Fatalf("qs did not use the passed sockets: %v (passed %s, %s)", p.Addr, httpLn.Addr(), mcLn.Addr())
		}
		return p
	}
	p := start()

	url := "http://" + httpLn.Addr().String() + "/healthz"
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && ctx.Err() == nil; i++ {
				resp, err := hc.Get(url)
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				if resp != nil {
					resp.Body.Close()
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for i := 0; i < 2; i++ {
		time.Sleep(300 * time.Millisecond)
		p.stop()
		p = start()
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	p.stop()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d connection attempts failed across restarts; first: %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 10 {
		t.Fatalf("only %d requests succeeded", ok.Load())
	}
	t.Logf("%d requests across 2 restarts, none failed", ok.Load())
}

// TestFirstReadSoonAfterStart builds a database of 1M keys, starts qs on it
// and measures the time from process start to the first successful read
// (under 200ms). A benchmark: set QS_BENCH=1.
func TestFirstReadSoonAfterStart(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("benchmark: set QS_BENCH=1 (builds a 1M-key database, asserts a time)")
	}
	dir := t.TempDir()
	const keys, perBatch = 1_000_000, 10_000
	s, err := store.Open(store.Options{Name: "default", Dir: dir + "/default"})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 64)
	for b := 0; b < keys/perBatch; b++ {
		ops := make([]wal.Op, perBatch)
		for i := range ops {
			ops[i] = wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "key-%08d", b*perBatch+i), Value: val}
		}
		if _, err := s.Write(context.Background(), store.Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var best time.Duration
	for attempt := 0; attempt < 3; attempt++ {
		d := timeToFirstRead(t, dir)
		if best == 0 || d < best {
			best = d
		}
	}
	t.Logf("1M keys: first read %v after process start (best of 3)", best)
	if best > 200*time.Millisecond {
		t.Fatalf("first read took %v, want under 200ms", best)
	}
}

func timeToFirstRead(t *testing.T, dir string) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ln.(*net.TCPListener).File()
	addr := ln.Addr().String()
	ln.Close()
	defer f.Close()
	cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, qsBin, "serve", "--data", dir, "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "LISTEN_FDNAMES=http")
	cmd.ExtraFiles = []*os.File{f}
	hc := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	p := startCmd(t, dir, cmd, 0)
	defer p.stop()
	url := "http://" + addr + "/v1/default/keys/key-00123456"
	for time.Since(start) < 10*time.Second {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(start)
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no successful read within 10s:\n%s", p.out.String())
	return 0
}
