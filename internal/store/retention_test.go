package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// checkRetained checks what any retained log must satisfy: entries below
// First are gone (ErrLogTruncated), First..Last are all there, and they
// chain from the stored base hash to the applied hash.
func checkRetained(t *testing.T, s *Store) LogRange {
	t.Helper()
	lr, err := s.LogRange()
	if err != nil {
		t.Fatal(err)
	}
	if lr.First > 1 {
		if _, err := s.ReadLog(lr.First-1, 10, 1<<20); !errors.Is(err, ErrLogTruncated) {
			t.Fatalf("ReadLog(%d) below the log start %d: %v", lr.First-1, lr.First, err)
		}
	}
	es, err := s.ReadLog(lr.First, 1<<30, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(es)) != lr.Last-lr.First+1 {
		t.Fatalf("log %d..%d holds %d entries", lr.First, lr.Last, len(es))
	}
	v := wal.Verifier{Index: lr.First - 1, Hash: lr.BaseHash}
	for i := range es {
		if err := v.Check(&es[i]); err != nil {
			t.Fatalf("retained log %d..%d: %v", lr.First, lr.Last, err)
		}
	}
	if a := appliedHash(t, s); v.Index != a.index || v.Hash != a.hash {
		t.Fatalf("chain ends at %d %s, applied %d %s", v.Index, v.Hash, a.index, a.hash)
	}
	mustVerify(t, s)
	return lr
}

func TestRetentionByEntries(t *testing.T) {
	t.Parallel()
	const max = 10
	s := openTest(t, Options{Name: "retain-entries", Retention: Retention{MaxEntries: max, MaxBytes: -1, MaxAge: -1}})
	truncated := s.Metrics().LogTruncatedEntries
	for i := 1; i <= 35; i++ {
		mustWrite(t, s, set("k", fmt.Sprint(i))) // one entry per block
		lr := checkRetained(t, s)
		if want := uint64(min(i, max)); lr.Last-lr.First+1 != want {
			t.Fatalf("after %d entries the log holds %d..%d, want %d entries", i, lr.First, lr.Last, want)
		}
	}
	if got := s.Metrics().LogTruncatedEntries - truncated; got != 35-max {
		t.Fatalf("%v entries counted as truncated, want %d", got, 35-max)
	}

	// Blocks of several entries (a replica applying batches): truncation
	// drops whole blocks, so the log keeps at most max entries and less
	// than max plus a block.
	root := openTest(t, Options{})
	for i := 0; i < 60; i++ {
		mustWrite(t, root, set("k", fmt.Sprint(i)))
	}
	all, err := root.ReadLog(1, 100, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	r := openTest(t, Options{Name: "retain-entries-blocks", DBID: root.DBID(), Retention: Retention{MaxEntries: max, MaxBytes: -1, MaxAge: -1}})
	for i, n := 0, 1; i < len(all); i, n = i+n, n%4+1 {
		if err := r.Apply(context.Background(), all[i:min(i+n, len(all))]); err != nil {
			t.Fatal(err)
		}
		lr := checkRetained(t, r)
		got := lr.Last - lr.First + 1
		if got > max && len(logBlocks(t, r)) > 1 || lr.Last >= max && got+4 <= max {
			t.Fatalf("after %d entries in blocks the log holds %d..%d (%d entries, blocks %v)", lr.Last, lr.First, lr.Last, got, logBlocks(t, r))
		}
	}
}

func TestRetentionByBytes(t *testing.T) {
	t.Parallel()
	const max = 16 << 10
	s := openTest(t, Options{Retention: Retention{MaxEntries: -1, MaxBytes: max, MaxAge: -1}, Compression: wal.CompressZstd})
	var block int64
	for i := 1; i <= 60; i++ {
		mustWrite(t, s, setb("k", pattern(i, 1000))) // incompressible: ~1 KiB blocks
		lr := checkRetained(t, s)
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			block = st.LogBytes
		}
		if st.LogBytes > max {
			t.Fatalf("after %d entries the log holds %d bytes, limit %d", i, st.LogBytes, max)
		}
		if lr.First > 1 && st.LogBytes+block <= max {
			t.Fatalf("after %d entries the log was cut to %d bytes (%d..%d), another %d-byte block fit", i, st.LogBytes, lr.First, lr.Last, block)
		}
	}
	if lr, _ := s.LogRange(); lr.First == 1 {
		t.Fatal("nothing was truncated")
	}
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestRetentionByAge ages entries by the clock that stamps them: a store
// whose clock is far from the wall clock (here, 2001) keeps exactly the
// entries younger than MaxAge by its own clock.
func TestRetentionByAge(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)}
	const maxAge = time.Hour
	s := openTest(t, Options{Now: clock.Now, Retention: Retention{MaxEntries: -1, MaxBytes: -1, MaxAge: maxAge}})
	times := map[uint64]time.Time{}
	for i := 1; i <= 30; i++ {
		r := mustWrite(t, s, set("k", fmt.Sprint(i)))
		times[r.Index] = clock.Now()
		lr := checkRetained(t, s)
		cutoff := clock.Now().Add(-maxAge)
		for idx := lr.First; idx <= lr.Last; idx++ {
			if idx != lr.Last && times[idx].Before(cutoff) {
				t.Fatalf("entry %d from %v retained at %v", idx, times[idx], clock.Now())
			}
		}
		if lr.First > 1 && !times[lr.First-1].Before(cutoff) {
			t.Fatalf("entry %d from %v dropped at %v, younger than %v", lr.First-1, times[lr.First-1], clock.Now(), maxAge)
		}
		if i >= 8 && lr.Last-lr.First+1 != 6 { // an entry every 11 minutes: 6 within the hour
			t.Fatalf("after %d entries at 11-minute steps, retained %d..%d", i, lr.First, lr.Last)
		}
		clock.Advance(11 * time.Minute)
	}
	if at := s.AppliedTime(); !at.Equal(times[s.AppliedIndex()]) {
		t.Fatalf("applied time %v, entry stamped %v", at, times[s.AppliedIndex()])
	}
}

// A root whose wall clock jumps a day ahead drops no log entry for it:
// retention by age goes by the log's clock, which keeps real time. With
// honest time passing afterwards, entries older than MaxAge by that clock
// are dropped and the younger ones kept.
func TestRetentionByAgeIgnoresClockJump(t *testing.T) {
	t.Parallel()
	clocks := &fakeClocks{}
	clocks.wall.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	const maxAge = 2 * time.Hour
	s := openTest(t, clocks.options(Options{Name: "retention-clock-jump", Logger: quietLogger(),
		Retention: Retention{MaxEntries: -1, MaxBytes: -1, MaxAge: maxAge}}))
	stamps := map[uint64]int64{} // entry index -> the log's time for it
	write := func(v string) LogRange {
		t.Helper()
		r := mustWrite(t, s, set("k", v))
		stamps[r.Index] = s.AppliedTime().UnixNano()
		return checkRetained(t, s)
	}
	for i := range 5 {
		write(fmt.Sprint("before ", i))
		clocks.pass(10 * time.Minute)
	}
	clocks.jump(24 * time.Hour)
	for i := range 3 {
		clocks.pass(time.Minute)
		if lr := write(fmt.Sprint("after the jump ", i)); lr.First != 1 {
			t.Fatalf("the wall clock jumped a day ahead: log starts at %d, want every entry of the last hour kept", lr.First)
		}
	}

	// Honest time: an entry every 20 minutes for 3 hours.
	var lr LogRange
	for i := range 9 {
		clocks.pass(20 * time.Minute)
		lr = write(fmt.Sprint("later ", i))
		cutoff := stamps[lr.Last] - maxAge.Nanoseconds()
		for idx := lr.First; idx < lr.Last; idx++ {
			if stamps[idx] < cutoff {
				t.Fatalf("entry %d dated %v retained; the log's clock is at %v", idx, time.Unix(0, stamps[idx]), time.Unix(0, stamps[lr.Last]))
			}
		}
		if lr.First > 1 && stamps[lr.First-1] >= cutoff {
			t.Fatalf("entry %d dated %v dropped, younger than %v by the log's clock (%v)", lr.First-1, time.Unix(0, stamps[lr.First-1]), maxAge, time.Unix(0, stamps[lr.Last]))
		}
	}
	if lr.First <= 8 {
		t.Fatalf("after 3 hours, log starts at %d: entries older than %v by the log's clock not dropped", lr.First, maxAge)
	}
}

// A replica whose clock is a day ahead of its root's keeps the log its
// root keeps: the age of an entry is the log's, not the replica's.
func TestRetentionByAgeOnReplicaAhead(t *testing.T) {
	t.Parallel()
	rootClock := &fakeClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	replicaClock := &fakeClock{t: rootClock.t.Add(24 * time.Hour)}
	retention := Retention{MaxEntries: -1, MaxBytes: -1, MaxAge: time.Hour}
	root := openTest(t, Options{Name: "retention-root", Now: rootClock.Now, Retention: retention, Logger: quietLogger()})
	replica := openTest(t, Options{Name: "retention-replica", DBID: root.DBID(), Now: replicaClock.Now, Retention: retention, Logger: quietLogger()})
	for i := range 9 {
		mustWrite(t, root, set("k", fmt.Sprint(i)))
		replicate(t, root, replica, 1)
		want, got := checkRetained(t, root), checkRetained(t, replica)
		if got != want {
			t.Fatalf("after %d entries 10 minutes apart: replica retains %d..%d, root %d..%d", i+1, got.First, got.Last, want.First, want.Last)
		}
		rootClock.Advance(10 * time.Minute)
		replicaClock.Advance(10 * time.Minute)
	}
	if lr := checkRetained(t, root); lr.First == 1 {
		t.Fatal("nothing older than an hour was dropped")
	}
}

// TestReadLogRanges: ReadLog returns exactly the requested range, whatever
// blocks the entries are stored in, bounded by entries and by bytes.
func TestReadLogRanges(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{})
	for i := 0; i < 40; i++ {
		mustWrite(t, root, setb(fmt.Sprintf("k%d", i%7), bytes.Repeat([]byte{byte(i)}, 10+i*3)))
	}
	want, err := root.ReadLog(1, 1000, 1<<30)
	if err != nil || len(want) != 40 {
		t.Fatalf("%d entries, %v", len(want), err)
	}
	// A replica stores them in blocks of 1, 2, 3, 4, 5, 1, 2, ... entries,
	// and truncates by entries so the log starts mid-way.
	r := openTest(t, Options{DBID: root.DBID(), Retention: Retention{MaxEntries: 30, MaxBytes: -1, MaxAge: -1}})
	for i, n := 0, 1; i < len(want); i, n = i+n, n%5+1 {
		if err := r.Apply(context.Background(), want[i:min(i+n, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	lr := checkRetained(t, r)
	if lr.First == 1 || len(logBlocks(t, r)) < 8 {
		t.Fatalf("fixture: log %d..%d in blocks %v", lr.First, lr.Last, logBlocks(t, r))
	}
	for _, s := range []*Store{root, r} {
		first, _ := s.LogRange()
		for from := first.First; from <= 41; from++ {
			for _, max := range []int{1, 2, 3, 4, 7, 100} {
				got, err := s.ReadLog(from, max, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				end := min(from+uint64(max)-1, 40)
				if from > 40 {
					if got != nil {
						t.Fatalf("ReadLog(%d) past the end: %d entries", from, len(got))
					}
					continue
				}
				if uint64(len(got)) != end-from+1 {
					t.Fatalf("ReadLog(%d, %d): %d entries, want %d..%d", from, max, len(got), from, end)
				}
				for i := range got {
					w := want[from-1+uint64(i)]
					if got[i].Index != w.Index || got[i].Hash != w.Hash || !sameOps(got[i].Ops, w.Ops) {
						t.Fatalf("ReadLog(%d, %d)[%d] = entry %d, want %d", from, max, i, got[i].Index, w.Index)
					}
				}
			}
			if from > 40 {
				continue
			}
			// By bytes: stop once maxBytes of bodies are gathered, never
			// returning nothing.
			for _, maxBytes := range []int{1, 100, 300} {
				got, err := s.ReadLog(from, 1000, maxBytes)
				if err != nil || len(got) == 0 || got[0].Index != from {
					t.Fatalf("ReadLog(%d, bytes %d): %d entries, %v", from, maxBytes, len(got), err)
				}
				size := 0
				for i := range got {
					if size >= maxBytes {
						t.Fatalf("ReadLog(%d, bytes %d) went on past %d bytes", from, maxBytes, size)
					}
					size += got[i].BodySize()
				}
				if size < maxBytes && got[len(got)-1].Index != 40 {
					t.Fatalf("ReadLog(%d, bytes %d) stopped at %d bytes", from, maxBytes, size)
				}
			}
		}
	}
	if _, err := r.ReadLog(0, 1, 1); !errors.Is(err, ErrLogTruncated) {
		t.Fatalf("ReadLog(0): %v", err)
	}
}

func sameOps(a, b []wal.Op) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// A large value whose log block retention drops stays readable when the
// group that drops the block only reads the key: an identical rewrite (a
// no-op) or a condition on it. (Such keys were once taken for keys the
// group rewrote, and their records were left pointing into the dropped
// block.)
func TestRetentionKeepsValuesTheGroupOnlyRead(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("q"), 3000)
	for _, how := range []string{"identical rewrite", "condition"} {
		t.Run(how, func(t *testing.T) {
			s := openTest(t, Options{Compression: wal.CompressNone, Retention: Retention{MaxEntries: 5}})
			r := mustWrite(t, s, setb("k", big))
			for i := range 4 {
				mustWrite(t, s, set(fmt.Sprint("f", i), "x"))
			}
			// This batch's commit drops k's block (entry 1).
			b := Batch{Ops: []wal.Op{set("g", "y")}}
			if how == "identical rewrite" {
				b.Ops = append(b.Ops, setb("k", big))
			} else {
				b.Conds = []Cond{{Key: []byte("k"), Index: r.Index}}
			}
			if _, err := s.Write(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			if lr, _ := s.LogRange(); lr.First < 2 {
				t.Fatalf("log not truncated: %+v", lr)
			}
			if v, idx, ok := get(t, s, "k"); !ok || v != string(big) || idx != r.Index {
				t.Fatalf("k = %d bytes at %d (found %v), want the value written at %d", len(v), idx, ok, r.Index)
			}
			mustVerify(t, s)
		})
	}
}

// TestRetentionStopsAtUnreadableBlock: retention that meets a block it
// cannot read (no summary, damaged header) drops the blocks before it and
// stops there: the log record moves to that block, so it never points at
// blocks the same batch deleted.
func TestRetentionStopsAtUnreadableBlock(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "retain-stop", Compression: wal.CompressNone, Retention: Retention{MaxEntries: 2, MaxBytes: -1, MaxAge: -1}})
	mustWrite(t, s, set("a", "1"))
	mustWrite(t, s, set("b", "2"))
	// Block 2 loses its summary and all but its first byte; blocks 1 and 2
	// are still inside the limit.
	rawDelete(t, s, summaryKey(2))
	rawSetBlock(t, s, 2, blockGet(t, s, 2)[:1])
	for i := 0; i < 3; i++ { // now 1 and 2 are over the limit
		mustWrite(t, s, set("c", fmt.Sprint(i)))
	}
	lr, err := s.LogRange()
	if err != nil {
		t.Fatal(err)
	}
	if lr.First != 2 {
		t.Fatalf("the log starts at %d, want 2 (block 1 dropped, retention stopped at block 2)", lr.First)
	}
	if _, err := s.ReadLog(1, 10, 1<<20); !errors.Is(err, ErrLogTruncated) {
		t.Fatalf("ReadLog(1) below the log start: %v", err)
	}
	if _, err := s.ReadLog(2, 10, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadLog of the damaged block: %v", err)
	}
	if es, err := s.ReadLog(3, 10, 1<<20); err != nil || len(es) != 3 {
		t.Fatalf("the entries after the damaged block: %d, %v", len(es), err)
	}
}
