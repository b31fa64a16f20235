package tests

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// freeAddr returns a loopback address with a kernel-chosen port that was
// free a moment ago, for a process started later.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func httpGet(addr, path string) (int, string, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestReplicaStartedBeforeItsSource starts a new replica whose source is
// not up yet: it waits (healthz 503, status "waiting", a failure counted),
// and once the root starts it learns the database id, replicates and
// serves.
func TestReplicaStartedBeforeItsSource(t *testing.T) {
	dir := t.TempDir()
	rootRepl := freeAddr(t)
	rep := startCmd(t, filepath.Join(dir, "replica"), exec.Command(qsBin, "serve", "--data", filepath.Join(dir, "replica"),
		"--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--log-level", "warn",
		"--upstream", rootRepl), 1)
	addr := rep.Addr["http"]

	code, body, err := httpGet(addr, "/healthz")
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("healthz of a waiting replica: %d %q %v, want 503", code, body, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err = httpGet(addr, "/v1/default/status")
		var st struct {
			State     string `json:"state"`
			Role      string `json:"role"`
			LastError string `json:"last_error"`
		}
		if err == nil && code == 200 && json.Unmarshal([]byte(body), &st) == nil && st.LastError != "" {
			if st.State != "waiting" || st.Role != "replica" || !strings.Contains(st.LastError, rootRepl) {
				t.Fatalf("status of a waiting replica: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiting status within 60s: %d %q %v", code, body, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body, _ := httpGet(addr, "/v1/default/keys/k"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting") {
		t.Fatalf("read from a waiting replica: %d %q, want 503 saying it waits", code, body)
	}
	_, metrics, err := httpGet(addr, "/metrics")
	if err != nil || !strings.Contains(metrics, `qs_server_source_waiting{db="default"} 1`) ||
		!strings.Contains(metrics, `qs_server_source_wait_failures_total{db="default"}`) {
		t.Fatalf("metrics of a waiting replica lack the wait gauge and failure counter (%v):\n%s", err, metrics)
	}

	root := startQS(t, filepath.Join(dir, "root"), "--repl", rootRepl)
	res, err := root.client(t).Put(context.Background(), "k", []byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New([]string{addr}, client.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for {
		v, err := c.Get(context.Background(), "k", client.ReadOptions{MinIndex: res.Index})
		if err == nil {
			if string(v.Value) != "v" {
				t.Fatalf("replica read %q, want v", v.Value)
			}
			break
		}
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("replica did not serve the root's write within 90s: %v\n%s", err, rep.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body, err := httpGet(addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz once replicating: %d %q %v", code, body, err)
	}
	rep.stop()
	root.stop()
}

// TestWaitingReplicaStopsOnSignal: a replica waiting for a source that
// never comes stops cleanly on SIGTERM and creates no store.
func TestWaitingReplicaStopsOnSignal(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "replica")
	rep := startCmd(t, data, exec.Command(qsBin, "serve", "--data", data,
		"--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--log-level", "warn",
		"--upstream", freeAddr(t)), 1)
	rep.stop()
	if code := rep.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d, output:\n%s", code, rep.out.String())
	}
	if _, err := os.Stat(filepath.Join(data, "default")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a replica that never reached its source left a store behind: %v", err)
	}
}
