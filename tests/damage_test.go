package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// A damaged engine table is a finding of qs verify (exit 3, naming the
// file and its key range), not a crash of the checker.
func TestVerifyNamesDamagedTable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "damaged")
	s, err := store.Open(store.Options{Name: "damaged", Dir: dir, MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i += 100 {
		var b store.Batch
		for j := i; j < i+100; j++ {
			b.Ops = append(b.Ops, wal.Op{Type: wal.OpSet, Key: []byte(fmt.Sprintf("key-%05d", j)), Value: []byte(fmt.Sprintf("value %d", j))})
		}
		if _, err := s.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out, code := runQS(t, "verify", "--data", dir); code != 0 {
		t.Fatalf("qs verify on intact data: exit %d:\n%s", code, out)
	}

	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil || len(tables) != 1 {
		t.Fatalf("want one table after a full compaction, have %v (%v)", tables, err)
	}
	b, err := os.ReadFile(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 10; i < len(b)/10+16; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(tables[0], b, 0o644); err != nil {
		t.Fatal(err)
	}

	out, code := runQS(t, "verify", "--data", dir)
	if code != 3 {
		t.Fatalf("qs verify on a damaged table: exit %d, want 3:\n%s", code, out)
	}
	if !strings.Contains(out, filepath.Base(tables[0])) || !strings.Contains(out, "keys [") {
		t.Fatalf("qs verify does not name the damaged table %s and its key range:\n%s", filepath.Base(tables[0]), out)
	}
}
