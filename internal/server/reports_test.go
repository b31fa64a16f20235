package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/repl"
)

// startNode starts an in-process server with the given configuration
// lines and returns it with its replication address. (One process has
// one replication process id: nodes of one tree run as qs processes, in
// tests/.)
func startNode(t *testing.T, name, extra string) (*Server, string) {
	t.Helper()
	return startNodeWith(t, name, "", extra)
}

// startNodeWith is startNode with top-level configuration lines top.
func startNodeWith(t *testing.T, name, top, extra string) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	text := fmt.Sprintf("data = %q\nhttp = \"127.0.0.1:0\"\nrepl = \"127.0.0.1:0\"\nnode_name = %q\n%s\n[[database]]\nname = \"default\"\nballast_bytes = -1\n%s", filepath.Join(dir, "data"), name, top, extra)
	cfg, err := config.Parse([]byte(text), "test")
	if err != nil {
		t.Fatal(err)
	}
	var announced bytes.Buffer
	s, err := newServer(cfg, slog.New(slog.DiscardHandler), &announced, privateMeters())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	for _, l := range strings.Split(announced.String(), "\n") {
		if a, ok := strings.CutPrefix(l, "repl listening on "); ok {
			return s, a
		}
	}
	t.Fatalf("no repl address in %q", announced.String())
	return nil, ""
}

// A report the node cannot use is refused and counted, and changes
// nothing; so is one for a database it does not serve.
func TestBadReportsAreCounted(t *testing.T) {
	s, _ := startNode(t, "t-bad", "")
	id := repl.NewProcessID()
	invalid := func(reason string) float64 {
		return testutil.ToFloat64(s.meters.server.reportsInvalid.WithLabelValues(reason))
	}
	for _, body := range []string{``, `{`, `{"v":1,"node":{"name":""}}`, `{"v":0,"node":{"name":"x","role":"replica"}}`} {
		if err := s.reports.receive("default", id, []byte(body)); err == nil {
			t.Errorf("report %q accepted", body)
		}
	}
	if err := s.reports.receive("nope", id, []byte(`{"v":1,"node":{"name":"x","role":"replica"}}`)); err == nil {
		t.Error("report for a database not served accepted")
	}
	if invalid("invalid") != 4 || invalid("unknown_database") != 1 {
		t.Errorf("counted %v invalid, %v unknown", invalid("invalid"), invalid("unknown_database"))
	}
	if n := s.dbs["default"].Tree(); len(n.Children) != 0 {
		t.Errorf("a refused report changed the tree: %+v", n)
	}
	// A valid one is taken.
	if err := s.reports.receive("default", id, []byte(`{"v":1,"node":{"name":"x","role":"replica"},"reads":[[5,1]]}`)); err != nil {
		t.Fatal(err)
	}
	if n := s.dbs["default"].Tree(); len(n.Children) != 1 || n.Children[0].Name != "x" {
		t.Errorf("tree after a valid report: %+v", n)
	}
	if !s.dbs["default"].KeyUse.ReadSince(5, time.Now().Add(-time.Minute)) {
		t.Error("the report's reads did not reach the window")
	}
}
