package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// rootHistory writes a history with every kind of change to root: inline
// and chunked values, overwrites that grow and shrink chunked values,
// deletes, no-op writes, conditional writes and heartbeats.
func rootHistory(t *testing.T, root *Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k%02d", i%13)
		switch i % 6 {
		case 0, 1:
			mustWrite(t, root, set(k, fmt.Sprint(i)), set(fmt.Sprintf("x%03d", i), "x"))
		case 2:
			mustWrite(t, root, setb(k, pattern(i, 500+i*97)))
		case 3:
			mustWrite(t, root, del(k), del(fmt.Sprintf("x%03d", i-3)))
		case 4:
			if _, err := root.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		case 5:
			cur := mustWrite(t, root, set(k, "cas"))
			if _, err := root.Write(ctx, Batch{Ops: []wal.Op{set(k, "cas2")}, Conds: []Cond{{Key: []byte(k), Index: cur.Index}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// replicate copies root's log from the replica's applied index on, in
// pages of page entries.
func replicate(t *testing.T, root, replica *Store, page int) {
	t.Helper()
	for replica.AppliedIndex() < root.AppliedIndex() {
		es, err := root.ReadLog(replica.AppliedIndex()+1, page, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if err := replica.Apply(context.Background(), es); err != nil {
			t.Fatal(err)
		}
	}
}

func sameState(t *testing.T, a, b *Store) {
	t.Helper()
	da, na := digest(t, a)
	db, nb := digest(t, b)
	if da != db || na != nb {
		t.Fatalf("data differs: %d keys vs %d keys", na, nb)
	}
	aa, ab := appliedHash(t, a), appliedHash(t, b)
	if aa != ab {
		t.Fatalf("applied %d %s at %d vs %d %s at %d", aa.index, aa.hash, aa.time, ab.index, ab.hash, ab.time)
	}
	if !a.AppliedTime().Equal(b.AppliedTime()) {
		t.Fatalf("applied time %v vs %v", a.AppliedTime(), b.AppliedTime())
	}
	sa, _ := a.Stats()
	sb, _ := b.Stats()
	if sa.Keys != sb.Keys || sa.KeyBytes != sb.KeyBytes || sa.ValueBytes != sb.ValueBytes {
		t.Fatalf("stats %+v vs %+v", sa, sb)
	}
}

func TestApplyReplicatesExactly(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{ChunkBytes: 1024, Compression: wal.CompressZstd})
	rootHistory(t, root, 80)
	// The replica chunks differently and compresses differently: neither
	// is part of the replicated state.
	dir := t.TempDir()
	ro := Options{Dir: dir, DBID: root.DBID(), ChunkBytes: 2048, Compression: wal.CompressSnappy}
	replica := openTest(t, ro)
	replicate(t, root, replica, 7)
	sameState(t, root, replica)
	mustVerify(t, root)
	mustVerify(t, replica)

	// More history, applied after the replica restarts.
	rootHistory(t, root, 40)
	replica.Close()
	replica = openTest(t, ro)
	replicate(t, root, replica, 1000)
	sameState(t, root, replica)
	mustVerify(t, replica)

	// The replica's own log serves a further replica identically.
	second := openTest(t, Options{DBID: root.DBID()})
	replicate(t, replica, second, 13)
	sameState(t, root, second)

	// A store of another database refuses to open.
	replica.Close()
	var other DBID
	other[0] = 7
	if _, err := Open(Options{Dir: dir, DBID: other, MinFreeBytes: 1, BallastBytes: -1}); !errors.Is(err, ErrDBIDMismatch) {
		t.Fatalf("open with another database id: %v", err)
	}
}

func TestApplyRejectsEntriesThatDoNotFollow(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{})
	rootHistory(t, root, 30)
	all, err := root.ReadLog(1, 1000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	replica := openTest(t, Options{DBID: root.DBID()})
	if err := replica.Apply(context.Background(), all[:10]); err != nil {
		t.Fatal(err)
	}
	before, _ := digest(t, replica)
	beforeLog, _ := replica.LogRange()

	forged := func(e wal.Entry) wal.Entry {
		e.Ops = append([]wal.Op(nil), e.Ops...)
		e.Ops = append(e.Ops, set("forged", "1"))
		return e
	}
	wrongHash := all[10]
	wrongHash.Hash[5] ^= 1
	cases := map[string][]wal.Entry{
		"gap":                  {all[11], all[12]},
		"duplicate":            {all[9]},
		"duplicate then next":  {all[9], all[10]},
		"wrong hash":           {wrongHash},
		"body changed":         {forged(all[10])},
		"good then gap":        {all[10], all[11], all[13]},
		"good then wrong hash": {all[10], all[11], func() wal.Entry { e := all[12]; e.Hash = all[11].Hash; return e }()},
		"repeated in batch":    {all[10], all[10]},
		"reordered":            {all[11], all[10]},
		"from another log":     {func() wal.Entry { e := all[10]; e.Seal(wal.Hash{9}, nil); return e }()},
	}
	for name, es := range cases {
		err := replica.Apply(context.Background(), es)
		if !errors.Is(err, ErrNotContiguous) {
			t.Errorf("%s: want ErrNotContiguous, got %v", name, err)
		}
		after, _ := digest(t, replica)
		lr, _ := replica.LogRange()
		if replica.AppliedIndex() != 10 || after != before || lr != beforeLog {
			t.Fatalf("%s: something was applied (applied %d, log %+v)", name, replica.AppliedIndex(), lr)
		}
	}
	mustVerify(t, replica)

	// The refusals did not disturb the replica: the real next entries apply.
	replicate(t, root, replica, 5)
	sameState(t, root, replica)
	mustVerify(t, replica)
}

// ReadLog from every index, at a block's start (the forward seek) and
// inside it (the backward one), returns the entries that follow.
func TestReadLogFromAnyIndex(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Name: "readlog-root"})
	for i := range 20 {
		mustWrite(t, root, set(fmt.Sprintf("k%02d", i), fmt.Sprint(i)))
	}
	all, err := root.ReadLog(1, 100, 1<<30)
	if err != nil || len(all) != 20 {
		t.Fatalf("%d entries, %v", len(all), err)
	}
	// A replica applying them 8 at a time stores blocks of 8 entries.
	rep := openTest(t, Options{Name: "readlog-rep", DBID: root.DBID()})
	replicate(t, root, rep, 8)
	for _, s := range []*Store{root, rep} {
		for from := uint64(1); from <= 20; from++ {
			es, err := s.ReadLog(from, 3, 1<<30)
			if err != nil {
				t.Fatalf("%s from %d: %v", s.Name(), from, err)
			}
			want := all[from-1 : min(from+2, 20)]
			if len(es) != len(want) {
				t.Fatalf("%s from %d: %d entries, want %d", s.Name(), from, len(es), len(want))
			}
			for i := range es {
				if es[i].Index != want[i].Index || es[i].Hash != want[i].Hash {
					t.Fatalf("%s from %d: entry %d is %d, want %d", s.Name(), from, i, es[i].Index, want[i].Index)
				}
			}
		}
	}
}
