package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// startMemcache serves the memcache commands readlat uses (version, set,
// get) from memory on a loopback port until the test ends, and counts
// the connections it accepted.
func startMemcache(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		items = map[string][]byte{}
		conns sync.WaitGroup
	)
	serve := func(c net.Conn) {
		defer conns.Done()
		defer c.Close()
		r, w := bufio.NewReader(c), bufio.NewWriter(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 1 && f[0] == "version":
				w.WriteString("VERSION fake\r\n")
			case len(f) >= 5 && f[0] == "set":
				n, err := strconv.Atoi(f[4])
				if err != nil || n < 0 {
					w.WriteString("CLIENT_ERROR bad length\r\n")
					w.Flush()
					return
				}
				b := make([]byte, n+2)
				if _, err := io.ReadFull(r, b); err != nil {
					return
				}
				mu.Lock()
				items[f[1]] = b[:n]
				mu.Unlock()
				w.WriteString("STORED\r\n")
			case len(f) >= 2 && (f[0] == "get" || f[0] == "gets"):
				mu.Lock()
				for _, k := range f[1:] {
					if v, ok := items[k]; ok {
						fmt.Fprintf(w, "VALUE %s 0 %d\r\n%s\r\n", k, len(v), v)
					}
				}
				mu.Unlock()
				w.WriteString("END\r\n")
			default:
				w.WriteString("ERROR\r\n")
			}
			if r.Buffered() == 0 {
				if w.Flush() != nil {
					return
				}
			}
		}
	}
	var open sync.Map
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			open.Store(c, true)
			conns.Add(1)
			go serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		conns.Wait()
	})
	return ln.Addr().String(), accepted
}

// TestBenchWritesSVG runs qs bench readlat against two memcache servers
// with --svg and checks the plot is written.
func TestBenchWritesSVG(t *testing.T) {
	a, _ := startMemcache(t)
	b, _ := startMemcache(t)
	dir := filepath.Join(t.TempDir(), "plots")
	err := cmdBench([]string{"readlat", "--target", "a=" + a, "--target", "b=" + b, "--baseline", "b",
		"--duration", "300ms", "--readlat-writers", "0,1", "--readlat-value-size", "1000", "--svg", dir})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "readlat.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<svg", ">a</text>", ">b</text>", "latency (log scale)"} {
		if !strings.Contains(string(data), s) {
			t.Errorf("readlat.svg has no %q", s)
		}
	}
}

// TestBenchSVGBadDir: a --svg directory that cannot be made fails the
// command before anything is measured.
func TestBenchSVGBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a, accepted := startMemcache(t)
	err := cmdBench([]string{"readlat", "--target", "a=" + a, "--duration", "300ms", "--svg", filepath.Join(file, "plots")})
	if err == nil || !strings.HasPrefix(err.Error(), "--svg: ") {
		t.Errorf("err %v, want an --svg error", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the target got %d connections: the run started", n)
	}
}
