package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
)

func makeDatabase(t *testing.T, data, name string) {
	t.Helper()
	st, err := store.Open(store.Options{Name: name, Dir: filepath.Join(data, name), BallastBytes: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// qs repair sets the database directory aside, deleting nothing; it
// refuses a missing database and an HA root member. (A database locked by
// a running server is refused too: TestForkedReplicaRepair in tests/, as
// the lock is per process.)
func TestRepair(t *testing.T) {
	data := t.TempDir()
	makeDatabase(t, data, "default")
	if err := cmdRepair([]string{"--data", data, "--db", "other"}); err == nil || !strings.Contains(err.Error(), "no database") {
		t.Fatalf("missing database: %v", err)
	}

	os.Mkdir(filepath.Join(data, "default.raft"), 0o700)
	if err := cmdRepair([]string{"--data", data}); err == nil || !strings.Contains(err.Error(), "HA root") {
		t.Fatalf("HA member: %v", err)
	}
	os.Remove(filepath.Join(data, "default.raft"))

	if err := cmdRepair([]string{"--data", data}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "default")); !os.IsNotExist(err) {
		t.Fatalf("database still in place: %v", err)
	}
	aside, _ := filepath.Glob(filepath.Join(data, "default.repaired-*"))
	if len(aside) != 1 {
		t.Fatalf("set aside: %v", aside)
	}
	if _, err := os.Stat(filepath.Join(aside[0], "LOCK")); err != nil {
		t.Fatalf("the set-aside directory lost its files: %v", err)
	}
}
