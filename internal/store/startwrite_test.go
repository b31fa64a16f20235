package store

import (
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// startOutcome is what a StartWrite's done reported.
type startOutcome struct {
	res WriteResult
	err error
}

// startWrite starts b and returns the channel its outcome arrives on.
func startWrite(t *testing.T, s *Store, b Batch) <-chan startOutcome {
	t.Helper()
	ch := make(chan startOutcome, 1)
	ok, err := s.StartWrite(b, func(r WriteResult, err error) { ch <- startOutcome{r, err} })
	if err != nil || !ok {
		t.Fatalf("StartWrite: queued %v, %v", ok, err)
	}
	return ch
}

func awaitStart(t *testing.T, ch <-chan startOutcome) startOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(60 * time.Second):
		t.Fatal("StartWrite's done was not called")
		return startOutcome{}
	}
}

func TestStartWriteDurable(t *testing.T) {
	s := openTest(t, Options{})
	mustWrite(t, s, set("a", "1"))
	chs := make([]<-chan startOutcome, 0, 8)
	for i := range 8 {
		chs = append(chs, startWrite(t, s, Batch{Ops: []wal.Op{set(string(rune('b'+i)), "v")}}))
	}
	seen := map[uint64]bool{}
	for _, ch := range chs {
		o := awaitStart(t, ch)
		if o.err != nil || !o.res.Changed || seen[o.res.Index] {
			t.Fatalf("outcome %+v, %v", o.res, o.err)
		}
		seen[o.res.Index] = true
	}
	for i := range 8 {
		if v, _, ok := get(t, s, string(rune('b'+i))); !ok || v != "v" {
			t.Fatalf("key %c: %q %v", 'b'+i, v, ok)
		}
	}
	mustVerify(t, s)
}

func TestStartWriteRefusals(t *testing.T) {
	s := openTest(t, Options{Name: "startwrite-refusals"})
	before, _ := digest(t, s)
	refused := writeErrors(t, "startwrite-refusals", "invalid")
	called := false
	ok, err := s.StartWrite(Batch{}, func(WriteResult, error) { called = true })
	if ok || !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty batch: queued %v, %v", ok, err)
	}
	if got := writeErrors(t, "startwrite-refusals", "invalid"); got != refused+1 {
		t.Fatalf("invalid writes counted %v -> %v", refused, got)
	}
	if after, _ := digest(t, s); after != before || called {
		t.Fatalf("a refused write changed the store (done called: %v)", called)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ok, err = s.StartWrite(Batch{Ops: []wal.Op{set("a", "1")}}, func(WriteResult, error) { called = true })
	if ok || !errors.Is(err, ErrClosed) || called {
		t.Fatalf("closed store: queued %v, %v, done called %v", ok, err, called)
	}
}

// A write started while the disk is full is answered with ErrDiskFull
// through done, and changes nothing.
func TestStartWriteDiskFull(t *testing.T) {
	const db = "startwrite-diskfull"
	const reserve = 1 << 20
	fs := newQuotaFS(vfs.NewMem(), 1<<30)
	s, err := Open(Options{Name: db, Dir: "/data/db", FS: fs, MinFreeBytes: reserve, BallastBytes: 256 << 10, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustWrite(t, s, set("a", "1"))
	before, _ := digest(t, s)
	used, _ := fs.usage()
	fs.setQuota(used + reserve/2)
	o := awaitStart(t, startWrite(t, s, Batch{Ops: []wal.Op{set("a", "2")}}))
	if !errors.Is(o.err, ErrDiskFull) {
		t.Fatalf("write on a full disk: %+v, %v", o.res, o.err)
	}
	if after, _ := digest(t, s); after != before {
		t.Fatal("data changed while the disk was full")
	}
	fs.setQuota(used + 64<<20)
	if o := awaitStart(t, startWrite(t, s, Batch{Ops: []wal.Op{set("a", "2")}})); o.err != nil {
		t.Fatalf("write after space returned: %v", o.err)
	}
	if v, _, _ := get(t, s, "a"); v != "2" {
		t.Fatalf("a = %q", v)
	}
}

// Every write queued when the store closes is answered, none twice.
func TestStartWriteAnsweredAtClose(t *testing.T) {
	s := openTest(t, Options{})
	const n = 200
	answered := make(chan error, 2*n)
	started := 0
	for i := range n {
		ok, err := s.StartWrite(Batch{Ops: []wal.Op{set(string(rune('a'+i%26))+string(rune('a'+i/26)), "v")}},
			func(_ WriteResult, err error) { answered <- err })
		if err != nil || !ok {
			break
		}
		started++
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range started {
		select {
		case err := <-answered:
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("write answered with %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a started write was never answered")
		}
	}
	if len(answered) != 0 {
		t.Fatal("a write was answered twice")
	}
}
