package repl

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

func TestBatchFrom(t *testing.T) {
	batch := relayEntries(5, 9)
	for _, c := range []struct {
		next uint64
		max  int
		want []uint64
	}{
		{5, 10, []uint64{5, 6, 7, 8, 9}},
		{7, 10, []uint64{7, 8, 9}},
		{6, 2, []uint64{6, 7}},
		{9, 10, []uint64{9}},
		{4, 10, nil},  // older than the batch: the log has it
		{10, 10, nil}, // newer
	} {
		if got := relayIndexes(batchFrom(batch, c.next, c.max, 1<<20)); !equalIndexes(got, c.want) {
			t.Errorf("batchFrom(5..9, %d, %d) = %v, want %v", c.next, c.max, got, c.want)
		}
	}
	if batchFrom(nil, 1, 10, 1<<20) != nil {
		t.Error("an empty batch gave entries")
	}
	// A part handed out cannot be appended to over the held batch.
	part := batchFrom(batch, 6, 2, 1<<20)
	if cap(part) != len(part) {
		t.Errorf("part of cap %d for %d entries", cap(part), len(part))
	}
	if olderBatch(nil, batch) || olderBatch(relayEntries(5, 8), batch) || olderBatch(batch, relayEntries(3, 9)) || !olderBatch(batch, relayEntries(1, 4)) {
		t.Error("olderBatch: want true only for a batch ending before the held one")
	}
}

// done reports whether r's read has ended.
func done(r *tailRead) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// One stream reads the log from an index while the others that want it
// wait for that read and take its batch; a database whose store was
// closed and opened again under its name does not get the old store's
// batch, and a read of the old store still ends its waits.
func TestTailBatches(t *testing.T) {
	name := dbName(t)
	a := openStore(t, "", name, store.DBID{}, store.Retention{})
	b := openStore(t, "", name, store.DBID{}, store.Retention{})
	var tb tailBatches
	es, wait, mine := tb.take(a, 5, 10, 1<<20)
	if es != nil || wait != nil || mine == nil {
		t.Fatalf("first take: %v, %v, %v; want to read", relayIndexes(es), wait, mine)
	}
	if _, wait, _ = tb.take(a, 5, 10, 1<<20); wait != mine {
		t.Fatal("a second stream at the same index was not told to wait for the read")
	}
	es, w, other := tb.take(a, 3, 10, 1<<20)
	if es != nil || w != nil || other != nil {
		t.Error("a stream at another index was told to wait, or took the read")
	}
	tb.put(a, other, relayEntries(3, 4)) // that one's read: not the awaited one
	if done(wait) {
		t.Fatal("another index's read ended the wait")
	}
	tb.put(a, mine, relayEntries(5, 9))
	if !done(wait) {
		t.Fatal("the read's end did not end the wait")
	}
	if es := wait.from(6, 10, 1<<20); !equalIndexes(relayIndexes(es), []uint64{6, 7, 8, 9}) {
		t.Fatalf("the waiter's part of the read: %v", relayIndexes(es))
	}
	if es, _, _ := tb.take(a, 7, 2, 1<<20); !equalIndexes(relayIndexes(es), []uint64{7, 8}) {
		t.Fatalf("take after the read: %v", relayIndexes(es))
	}
	tb.put(a, nil, relayEntries(1, 3)) // a lagging stream's batch: the tip stays
	if es, _, _ := tb.take(a, 9, 10, 1<<20); !equalIndexes(relayIndexes(es), []uint64{9}) {
		t.Errorf("after an older batch: %v", relayIndexes(es))
	}
	// A read whose batch is not held (it ends before the held one) still
	// serves the streams that waited for it.
	tb.put(a, nil, relayEntries(10, 12))
	_, _, mine = tb.take(a, 8, 10, 1<<20) // 8 is not held any more
	_, wait, _ = tb.take(a, 8, 10, 1<<20)
	tb.put(a, mine, relayEntries(8, 11))
	if es := wait.from(8, 10, 1<<20); !equalIndexes(relayIndexes(es), []uint64{8, 9, 10, 11}) {
		t.Errorf("a waiter of a read not held: %v", relayIndexes(es))
	}
	// A read that found nothing (or failed) ends the wait too, and the
	// waiter then reads itself.
	_, _, mine = tb.take(a, 13, 10, 1<<20)
	_, wait, _ = tb.take(a, 13, 10, 1<<20)
	tb.put(a, mine, nil)
	if !done(wait) || wait.from(13, 10, 1<<20) != nil {
		t.Fatal("an empty read did not end the wait with nothing")
	}
	es, w, mine = tb.take(a, 13, 10, 1<<20)
	if es != nil || w != nil || mine == nil {
		t.Fatal("after an empty read the next stream was not told to read")
	}
	// The store is replaced while that read runs: its end still wakes
	// the streams waiting for it, and the new store gets nothing of a's.
	_, wait, _ = tb.take(a, 13, 10, 1<<20)
	if es, w, m := tb.take(b, 6, 10, 1<<20); es != nil || w != nil || m == nil {
		t.Errorf("another store of the same name: %v, %v, %v", relayIndexes(es), w, m)
	}
	tb.put(a, mine, relayEntries(13, 14))
	if !done(wait) || !equalIndexes(relayIndexes(wait.from(13, 10, 1<<20)), []uint64{13, 14}) {
		t.Fatal("a read of the replaced store did not serve its waiter")
	}
	if es, _, _ := tb.take(b, 13, 10, 1<<20); es != nil {
		t.Errorf("the new store took the old one's batch: %v", relayIndexes(es))
	}
}

// The streams of several children at a root's tip read each new entry
// from the log once between them, not once each.
func TestStreamsAtTipShareLogReads(t *testing.T) {
	var reads atomic.Int64
	testHookReadLog = func(*store.Store, uint64) { reads.Add(1) }
	t.Cleanup(func() { testHookReadLog = nil })
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	const children, writes = 4, 30
	var leaves []*store.Store
	for range children {
		st := openStore(t, "", name, root.DBID(), store.Retention{})
		startReplica(t, st, NewProcessID(), []string{rootAddr}, nil)
		leaves = append(leaves, st)
	}
	for _, st := range leaves {
		waitCaughtUp(t, st, root)
	}
	before := reads.Load()
	for i := range writes {
		idx := write(t, root, fmt.Sprintf("k%d", i), "v")
		for _, st := range leaves {
			waitFor(t, "a child to apply the write", 30*time.Second, func() bool { return st.AppliedIndex() >= idx })
		}
	}
	for _, st := range leaves {
		assertSame(t, root, st)
	}
	// Each child's stream read once per entry before the streams shared
	// their reads: children × writes (120 here). Now one read per entry,
	// and at most one more per child that fell out of step.
	if n := reads.Load() - before; n > writes+children {
		t.Errorf("%d log reads for %d writes to %d children", n, writes, children)
	}
}
