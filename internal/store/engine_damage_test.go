package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// damageEngineFile flips bytes at a fraction of the way into the largest
// closed-store file of dir whose name ends in suffix, and returns its
// path.
func damageEngineFile(t *testing.T, dir, suffix string, at float64) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s file in %s (%v)", suffix, dir, err)
	}
	var path string
	var size int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			path, size = f, fi.Size()
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := int(float64(len(b)) * at)
	for i := off; i < off+16 && i < len(b); i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readKeys reads every key; it returns how many were served and how many
// failed with ErrCorrupt, and fails the test on any other error.
func readKeys(t *testing.T, s *Store, n int, valueOf func(i int) []byte) (served, corrupt int) {
	t.Helper()
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("key-%05d", i)
		val, _, found, err := v.Get([]byte(k))
		switch {
		case errors.Is(err, ErrCorrupt):
			if val != nil || found {
				t.Fatalf("%s: damaged data served with the error", k)
			}
			corrupt++
		case err != nil:
			t.Fatalf("%s: %v (want ErrCorrupt or the value)", k, err)
		case !found || string(val) != string(valueOf(i)):
			t.Fatalf("%s: wrong value served (found %v, %d bytes)", k, found, len(val))
		default:
			served++
		}
	}
	return served, corrupt
}

// damagedStore writes n keys with values from valueOf, flushes them into
// tables and closes the store, then damages a file ending in suffix.
func damagedStore(t *testing.T, o Options, n int, valueOf func(i int) []byte, suffix string) string {
	t.Helper()
	s := openTest(t, o)
	for i := 0; i < n; i += 100 {
		var b Batch
		for j := i; j < i+100 && j < n; j++ {
			b.Ops = append(b.Ops, setb(fmt.Sprintf("key-%05d", j), valueOf(j)))
		}
		if _, err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	return damageEngineFile(t, o.Dir, suffix, 0.1)
}

func TestDamagedTableIsCountedNotFatal(t *testing.T) {
	t.Parallel()
	const db = "damaged-table"
	o := Options{Name: db, Dir: t.TempDir(), Logger: quietLogger()}
	const n = 3000
	valueOf := func(i int) []byte { return []byte(fmt.Sprintf("value %d of a small key", i)) }
	path := damagedStore(t, o, n, valueOf, ".sst")

	s := openTest(t, o)
	before := integrityErrors(s, "engine")
	served, corrupt := readKeys(t, s, n, valueOf)
	if corrupt == 0 || served == 0 {
		t.Fatalf("%d keys served, %d damaged: want both", served, corrupt)
	}
	if got := integrityErrors(s, "engine"); got <= before {
		t.Errorf("engine integrity errors %v -> %v", before, got)
	}
	// A compaction over the damage (a newer value of an intact key above
	// the damaged table makes it rewrite the table) fails and is
	// reported, not fatal.
	last := n - 1
	if _, err := s.Write(t.Context(), Batch{Ops: []wal.Op{setb(fmt.Sprintf("key-%05d", last), []byte("a newer value"))}}); err != nil {
		t.Fatal(err)
	}
	compactions := integrityErrors(s, "compaction")
	if err := s.Compact(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("compaction over a damaged table: %v, want ErrCorrupt", err)
	}
	if got := integrityErrors(s, "compaction"); got <= compactions {
		t.Errorf("compaction integrity errors %v -> %v", compactions, got)
	}
	valueOf = func(i int) []byte {
		if i == last {
			return []byte("a newer value")
		}
		return []byte(fmt.Sprintf("value %d of a small key", i))
	}
	if s2, _ := readKeys(t, s, n, valueOf); s2 != served {
		t.Errorf("after the compaction %d keys served, before %d", s2, served)
	}
	// The offline check names the damaged table and its key range.
	r, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range r.Problems {
		if p.Kind == ProblemEngine && strings.Contains(p.Detail, filepath.Base(path)) && strings.Contains(p.Detail, "keys [") {
			found = true
		}
	}
	if !found {
		t.Fatalf("verify does not name %s with its key range: %v", filepath.Base(path), r.Problems)
	}
	s.Close()
	// And it stays so across restarts: the store opens and serves again.
	s = openTest(t, o)
	if s3, _ := readKeys(t, s, n, valueOf); s3 != served {
		t.Errorf("after a restart %d keys served, before %d", s3, served)
	}
}

func TestDamagedBlobFileIsIntegrity(t *testing.T) {
	t.Parallel()
	const db = "damaged-blob"
	// Chunks of 1 KiB go to the engine's blob files.
	o := Options{Name: db, Dir: t.TempDir(), Logger: quietLogger(), ChunkBytes: 1024}
	const n = 400
	valueOf := func(i int) []byte { return pattern(i, 3000) }
	damagedStore(t, o, n, valueOf, ".blob")

	s := openTest(t, o)
	before := integrityErrors(s, "engine") + integrityErrors(s, "chunk_crc")
	served, corrupt := readKeys(t, s, n, valueOf)
	if corrupt == 0 || served == 0 {
		t.Fatalf("%d keys served, %d damaged: want both", served, corrupt)
	}
	// Pebble's block checksum or the chunk's own CRC catches it.
	if got := integrityErrors(s, "engine") + integrityErrors(s, "chunk_crc"); got <= before {
		t.Errorf("integrity errors %v -> %v", before, got)
	}
}
