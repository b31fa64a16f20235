package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// A damaged engine table is a finding of qs verify (exit 3, naming the
// file and its key range), not a crash of the checker.
func TestVerifyNamesDamagedTable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "damaged")
	table := writeDamagedTable(t, "damaged", dir)
	out, code := runQS(t, "verify", "--data", dir)
	if code != 3 {
		t.Fatalf("qs verify on a damaged table: exit %d, want 3:\n%s", code, out)
	}
	if !strings.Contains(out, filepath.Base(table)) || !strings.Contains(out, "keys [") {
		t.Fatalf("qs verify does not name the damaged table %s and its key range:\n%s", filepath.Base(table), out)
	}
}

// A server on a database with a damaged table keeps running: reads of
// keys in the damaged block answer 500 integrity, the others their value.
func TestServeWithDamagedTable(t *testing.T) {
	data := t.TempDir()
	writeDamagedTable(t, "default", filepath.Join(data, "default"))
	p := startQS(t, data)
	c := p.client(t)
	served, damaged := 0, 0
	for i := 0; i < damagedKeys; i++ {
		k := fmt.Sprintf("key-%05d", i)
		v, err := c.Get(context.Background(), k, client.ReadOptions{})
		var ce *client.Error
		switch {
		case errors.As(err, &ce) && ce.Status == 500 && ce.Code == "integrity":
			damaged++
		case err != nil:
			t.Fatalf("%s: %v (want its value or 500 integrity)", k, err)
		case string(v.Value) != fmt.Sprintf("value %d", i):
			t.Fatalf("%s: wrong value %q", k, v.Value)
		default:
			served++
		}
	}
	if served == 0 || damaged == 0 {
		t.Fatalf("%d keys served, %d answered integrity: want both", served, damaged)
	}
	if _, err := c.Put(context.Background(), "after", []byte("x"), nil); err != nil {
		t.Fatalf("write after reads of damaged data: %v", err)
	}
}

const damagedKeys = 3000

// writeDamagedTable creates database name in dir with damagedKeys keys
// compacted into one table, and damages a block of that table.
func writeDamagedTable(t *testing.T, name, dir string) string {
	t.Helper()
	s, err := store.Open(store.Options{Name: name, Dir: dir, MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < damagedKeys; i += 100 {
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

	return tables[0]
}
