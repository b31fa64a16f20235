package repl

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func relayEntries(from, to uint64) []wal.Entry {
	var es []wal.Entry
	for i := from; i <= to; i++ {
		es = append(es, wal.Entry{Index: i, Kind: wal.KindData,
			Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k"), Value: make([]byte, 100)}}})
	}
	return es
}

func relayIndexes(es []wal.Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Index)
	}
	return out
}

// The relay holds what was verified and is not durable yet, and hands out
// only entries it holds, from the one asked for.
func TestRelayHoldsTheUndurableTail(t *testing.T) {
	rl := newRelay()
	if got := rl.read(1, 10, 1<<20); got != nil {
		t.Fatalf("empty relay gave %v", relayIndexes(got))
	}
	ch := rl.changed()
	rl.add(relayEntries(5, 7))
	select {
	case <-ch:
	default:
		t.Fatal("adding entries did not wake the streams")
	}
	rl.add(relayEntries(8, 9)) // continues them
	for _, c := range []struct {
		from       uint64
		max, bytes int
		want       []uint64
	}{
		{4, 10, 1 << 20, nil},  // durable already: the log has it
		{10, 10, 1 << 20, nil}, // not received yet
		{5, 10, 1 << 20, []uint64{5, 6, 7, 8, 9}},
		{7, 10, 1 << 20, []uint64{7, 8, 9}},
		{6, 2, 1 << 20, []uint64{6, 7}}, // entry cap
		{6, 10, 1, []uint64{6}},         // byte cap: at least one
	} {
		if got := relayIndexes(rl.read(c.from, c.max, c.bytes)); !equalIndexes(got, c.want) {
			t.Errorf("read(%d, %d, %d) = %v, want %v", c.from, c.max, c.bytes, got, c.want)
		}
	}
	rl.durable(6)
	if got := relayIndexes(rl.read(5, 10, 1<<20)); got != nil {
		t.Errorf("durable entries still relayed: %v", got)
	}
	if got := relayIndexes(rl.read(7, 10, 1<<20)); !equalIndexes(got, []uint64{7, 8, 9}) {
		t.Errorf("after durable(6): %v", got)
	}
	rl.add(relayEntries(20, 21)) // a new session's batch replaces the rest
	if got := relayIndexes(rl.read(8, 10, 1<<20)); got != nil {
		t.Errorf("replaced entries still relayed: %v", got)
	}
	if got := relayIndexes(rl.read(20, 10, 1<<20)); !equalIndexes(got, []uint64{20, 21}) {
		t.Errorf("after a new batch: %v", got)
	}
	rl.drop()
	if got := rl.read(20, 10, 1<<20); got != nil {
		t.Errorf("dropped entries still relayed: %v", relayIndexes(got))
	}
	rl.durable(100) // nothing held: no effect
	rl.sent(9)
	rl.sent(4)
	if rl.forwarded.Load() != 9 {
		t.Errorf("forwarded = %d, want the highest sent, 9", rl.forwarded.Load())
	}
}

func equalIndexes(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCutThroughChildAhead: an intermediate passes a verified batch to its
// child before its own store makes it durable (the child applies it while
// the intermediate is held before its commit). A child that reconnects
// then is ahead of its source: refused "ahead", it waits, never
// bootstraps, and resumes once the source caught up; all three end with
// the same log and data.
func TestCutThroughChildAhead(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	leaf := openStore(t, "", name, root.DBID(), store.Retention{})
	write(t, root, "a", "1")

	var holdAt atomic.Uint64 // hold the batch reaching this index; 0: none
	release := make(chan struct{})
	midPID := NewProcessID()
	startReplica(t, mid, midPID, []string{rootAddr}, func(c *ReplicaConfig) {
		c.BeforeApply = func(last uint64) {
			if h := holdAt.Load(); h != 0 && last >= h {
				select {
				case <-release:
				case <-time.After(60 * time.Second):
				}
			}
		}
	})
	midAddr := startServer(t, mid, midPID, nil)
	lr, _ := startReplica(t, leaf, NewProcessID(), []string{midAddr}, nil)
	waitCaughtUp(t, leaf, root)

	relayed := value(metricsOf(t).entriesRelayed)
	holdAt.Store(root.AppliedIndex() + 1)
	idx := write(t, root, "b", "2")
	waitFor(t, "the leaf to apply the held batch", 30*time.Second, func() bool { return leaf.AppliedIndex() >= idx })
	if got := mid.AppliedIndex(); got >= idx {
		t.Fatalf("the intermediate applied %d while held before its commit", got)
	}
	if ForwardedIndex(mid) < idx {
		t.Fatalf("forwarded index %d, want at least %d", ForwardedIndex(mid), idx)
	}
	if value(metricsOf(t).entriesRelayed) <= relayed {
		t.Error("entries sent before they were durable not counted")
	}

	// The child reconnects while ahead of its source.
	aheadBefore := value(metricsOf(t).clientRefused.WithLabelValues(name, RefuseAhead.String()))
	lr.Reconnect()
	waitRefused(t, lr, RefuseAhead)
	if value(metricsOf(t).clientRefused.WithLabelValues(name, RefuseAhead.String())) <= aheadBefore {
		t.Error("the ahead refusal was not counted")
	}
	close(release)
	writeN(t, root, "after", 20)
	waitCaughtUp(t, mid, root)
	waitCaughtUp(t, leaf, root)
	assertSame(t, root, mid)
	assertSame(t, root, leaf)
	if st := lr.State(); st.Bootstraps != 0 {
		t.Fatalf("the child bootstrapped %d times", st.Bootstraps)
	}
}

// A child waiting for the next batch is sent it before the intermediate
// hands the batch to its store: the stream runs first, not behind the
// committer's work and fsync. On one processor the order is the
// scheduler's alone, so it is counted, not timed: BeforeApply, which runs
// right before the store's commit, sees each batch already forwarded.
func TestCutThroughForwardsBeforeCommit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	leaf := openStore(t, "", name, root.DBID(), store.Retention{})
	write(t, root, "a", "1")

	var batches, forwarded atomic.Int64
	var counting atomic.Bool
	midPID := NewProcessID()
	startReplica(t, mid, midPID, []string{rootAddr}, func(c *ReplicaConfig) {
		c.BeforeApply = func(last uint64) {
			if !counting.Load() {
				return
			}
			batches.Add(1)
			if ForwardedIndex(mid) >= last {
				forwarded.Add(1)
			}
		}
	})
	midAddr := startServer(t, mid, midPID, nil)
	startReplica(t, leaf, NewProcessID(), []string{midAddr}, nil)
	waitCaughtUp(t, mid, root)
	waitCaughtUp(t, leaf, root)

	counting.Store(true)
	const writes = 100
	for i := range writes {
		idx := write(t, root, fmt.Sprintf("k%d", i), "v")
		// Both caught up: the child's stream waits for the next batch.
		waitFor(t, "the chain to apply the write", 30*time.Second, func() bool {
			return mid.AppliedIndex() >= idx && leaf.AppliedIndex() >= idx
		})
	}
	counting.Store(false)
	n, f := batches.Load(), forwarded.Load()
	t.Logf("%d of %d batches forwarded before the intermediate's commit", f, n)
	if n < writes {
		t.Fatalf("%d batches for %d writes sent one at a time", n, writes)
	}
	// The scheduler looks at its global queue first once in 61 turns,
	// where the yielding goroutine waits: a few batches go the other way.
	if f < n*3/4 {
		t.Fatalf("%d of %d batches forwarded before the intermediate's commit, want at least three quarters", f, n)
	}
	assertSame(t, root, leaf)
}

// A stream at its source's tip waits for the next commit (or relayed
// batch) without reading the log: there is nothing past the applied index
// to read. Every read it makes is of entries the source has applied, for
// a root's child and for an intermediate's.
func TestStreamAtTipDoesNotReadTheLog(t *testing.T) {
	var reads, pastTip atomic.Int64
	testHookReadLog = func(st *store.Store, next uint64) {
		reads.Add(1)
		if next > st.AppliedIndex() { // the applied index only grows
			pastTip.Add(1)
		}
	}
	t.Cleanup(func() { testHookReadLog = nil })
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	leaf := openStore(t, "", name, root.DBID(), store.Retention{})
	midPID := NewProcessID()
	startReplica(t, mid, midPID, []string{rootAddr}, nil)
	midAddr := startServer(t, mid, midPID, nil)
	startReplica(t, leaf, NewProcessID(), []string{midAddr}, nil)
	// One entry at a time, each streamed down before the next: the
	// streams wait at the tip between them.
	for i := range 30 {
		idx := write(t, root, fmt.Sprintf("k%d", i), "v")
		waitFor(t, "the leaf to apply the write", 30*time.Second, func() bool { return leaf.AppliedIndex() >= idx })
	}
	assertSame(t, root, leaf)
	if reads.Load() == 0 {
		t.Fatal("no log read seen: the hook is not called")
	}
	if n := pastTip.Load(); n != 0 {
		t.Errorf("%d of %d log reads were past the applied index", n, reads.Load())
	}
}

// A stream waiting at the tip of a store that closes ends at its next
// idle Progress, as one reading the log does, instead of sending stale
// Progress for as long as its connection lasts.
func TestStreamAtTipEndsWhenItsStoreCloses(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	rootAddr := startServer(t, root, NewProcessID(), nil)
	replica := openStore(t, "", name, root.DBID(), store.Retention{})
	writeN(t, root, "k", 3)
	startReplica(t, replica, NewProcessID(), []string{rootAddr}, nil)
	waitCaughtUp(t, replica, root)
	conns := metricsOf(t).serverConns
	if value(conns) != 1 {
		t.Fatalf("%v connections to the server, want the replica's", value(conns))
	}
	root.Close()
	waitFor(t, "the stream of the closed store to end", 30*time.Second, func() bool { return value(conns) == 0 })
}
