package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/config"
)

// TestWatchersLeaveConnectionsToReaders: watchers can take only their
// share of the HTTP connections (watch_max_watchers, derived from
// max_http_conns): the next watcher gets a clear 503 and reads are still
// served, instead of waiting for a connection slot behind the watchers.
func TestWatchersLeaveConnectionsToReaders(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf("data = %q\nhttp = \"127.0.0.1:0\"\nrepl = \"off\"\nmax_http_conns = 16\n[[database]]\nname = \"default\"\n", filepath.Join(dir, "data"))), "test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WatchMaxWatchers != 8 {
		t.Fatalf("watch_max_watchers %d for 16 connections, want 8", cfg.WatchMaxWatchers)
	}
	var announced bytes.Buffer
	s, err := New(cfg, slog.New(slog.DiscardHandler), &announced)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	var base string
	for _, l := range strings.Split(announced.String(), "\n") {
		if a, ok := strings.CutPrefix(l, "http listening on "); ok {
			base = "http://" + a
		}
	}
	if base == "" {
		t.Fatalf("no http address in %q", announced.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	watch := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/default/watch", nil)
		res, err := (&http.Transport{}).RoundTrip(req) // a connection each
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range cfg.WatchMaxWatchers {
		res := watch()
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("watcher %d: %d", i, res.StatusCode)
		}
		if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil { // its first line
			t.Fatal(err)
		}
	}
	res := watch()
	if res.StatusCode != http.StatusServiceUnavailable {
		res.Body.Close()
		t.Fatalf("watcher over the limit: %d", res.StatusCode)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "too_many_watchers") {
		t.Fatalf("watcher over the limit: %s", body)
	}
	for i := range 8 { // more than the connections the watchers left, one at a time
		res, err := client.Get(base + "/v1/default/status")
		if err != nil {
			t.Fatalf("read %d with every watcher open: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("read %d: %d", i, res.StatusCode)
		}
	}
}
