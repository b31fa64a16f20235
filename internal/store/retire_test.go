package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// retiredState reads the retired block records and totals.
func retiredOnDisk(t *testing.T, s *Store) (map[uint64]retiredRecord, retiredTotals) {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: metaRetiredBlock, UpperBound: prefixEnd(metaRetiredBlock)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	recs := map[uint64]retiredRecord{}
	for ok := it.First(); ok; ok = it.Next() {
		b, _ := retiredKeyBlock(it.Key())
		r, err := decodeRetired(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		recs[b] = r
	}
	tot, err := s.loadRetiredTotals()
	if err != nil {
		t.Fatal(err)
	}
	return recs, tot
}

func blockExists(t *testing.T, s *Store, b uint64) bool {
	t.Helper()
	_, c, err := s.db.Get(logKey(b))
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	return true
}

// Blocks of large values leave the log without their values being copied
// out; overwrites and deletes count them down; a block is deleted once
// less than half of it is live, its last live values copied out then.
func TestRetiredBlocks(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "retired", Compression: wal.CompressZstd, Retention: Retention{MaxEntries: 4}, History: noHistory})
	// A replica follows entry by entry: it retires and frees blocks the
	// same way and ends with the same data.
	rp := openTest(t, Options{Name: "retired-replica", DBID: s.DBID(), Retention: Retention{MaxEntries: 4}, History: noHistory})
	mustWrite := func(t *testing.T, s *Store, ops ...wal.Op) WriteResult {
		t.Helper()
		r := mustWrite(t, s, ops...)
		replicate(t, s, rp, 1)
		return r
	}
	// Blocks 1..6: each holds four values of 2,000 bytes (one entry).
	val := func(b, j int) []byte { return pattern(b*10+j, 2000) }
	key := func(b, j int) string { return fmt.Sprintf("k%d-%d", b, j) }
	for b := 1; b <= 6; b++ {
		var ops []wal.Op
		for j := range 4 {
			ops = append(ops, setb(key(b, j), val(b, j)))
		}
		if r := mustWrite(t, s, ops...); r.Index != uint64(b) {
			t.Fatalf("entry %d at index %d", b, r.Index)
		}
	}
	materialized := s.Metrics().ValuesMaterialized
	recs, tot := retiredOnDisk(t, s)
	if len(recs) != 2 || tot.blocks != 2 || materialized != 0 {
		t.Fatalf("after 6 blocks with a 4-entry log: %d retired records %+v, totals %+v, %v values copied out", len(recs), recs, tot, materialized)
	}
	for b := uint64(1); b <= 2; b++ {
		if r := recs[b]; r.live != 4 || r.liveBytes != 8000 || !blockExists(t, s, b) {
			t.Fatalf("block %d: record %+v, exists %v", b, r, blockExists(t, s, b))
		}
	}
	mustVerify(t, s)

	// Block 1: one value overwritten: three quarters live, kept.
	mustWrite(t, s, set(key(1, 0), "small"))
	recs, _ = retiredOnDisk(t, s)
	if r := recs[1]; r.live != 3 || r.liveBytes != 6000 || !blockExists(t, s, 1) {
		t.Fatalf("block 1 after 1 of 4 values replaced: %+v", r)
	}
	// One deleted: less than half of the block's bytes live (headers
	// count too), so the last two values are copied out and the block
	// deleted.
	mustWrite(t, s, del(key(1, 1)))
	recs, tot = retiredOnDisk(t, s)
	if _, ok := recs[1]; ok || blockExists(t, s, 1) {
		t.Fatalf("block 1, half live, still kept: %+v", recs[1])
	}
	if got := s.Metrics().ValuesMaterialized; got != materialized+2 {
		t.Fatalf("%v values copied out, want 2", got-materialized)
	}
	for j := 2; j < 4; j++ {
		if v, _, ok := get(t, s, key(1, j)); !ok || v != string(val(1, j)) {
			t.Fatalf("%s, copied out of block 1, reads %d bytes (found %v)", key(1, j), len(v), ok)
		}
	}
	// Block 2: all four overwritten in one batch: deleted, nothing copied.
	before := s.Metrics().ValuesMaterialized
	var ops []wal.Op
	for j := range 4 {
		ops = append(ops, set(key(2, j), "new"))
	}
	mustWrite(t, s, ops...)
	if blockExists(t, s, 2) || s.Metrics().ValuesMaterialized != before {
		t.Fatal("block 2, all overwritten, still kept or copied from")
	}
	recs, tot = retiredOnDisk(t, s)
	for b, r := range recs {
		if !blockExists(t, s, b) {
			t.Fatalf("record for missing block %d", b)
		}
		if r.live == 0 {
			t.Fatalf("block %d kept with nothing live", b)
		}
	}
	if tot.blocks != int64(len(recs)) {
		t.Fatalf("totals %+v for %d records", tot, len(recs))
	}
	for b := 3; b <= 6; b++ {
		for j := range 4 {
			if v, _, ok := get(t, s, key(b, j)); !ok || v != string(val(b, j)) {
				t.Fatalf("%s reads %d bytes (found %v)", key(b, j), len(v), ok)
			}
		}
	}
	rep := mustVerify(t, s)
	if rep.RetiredBlocks != tot.blocks || rep.RetiredBytes != tot.bytes {
		t.Fatalf("verify found %d retired blocks of %d bytes, totals say %+v", rep.RetiredBlocks, rep.RetiredBytes, tot)
	}

	sameState(t, s, rp)
	mustVerify(t, rp)
}

// A retired block's count that is too low is caught before the block is
// deleted: the records are counted again and the block kept.
func TestRetiredCountCheckedBeforeDelete(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "retired-recount", Retention: Retention{MaxEntries: 2}, History: noHistory})
	mustWrite(t, s, setb("a", pattern(1, 1500)), setb("b", pattern(2, 4000)))
	for i := range 3 {
		mustWrite(t, s, set(fmt.Sprint("f", i), "x"))
	}
	recs, _ := retiredOnDisk(t, s)
	if r, ok := recs[1]; !ok || r.live != 2 {
		t.Fatalf("block 1 not retired with 2 live values: %+v", recs)
	}
	// Damage the count: 1 instead of 2 (and the bytes to match).
	if err := s.db.Set(retiredKey(1), retiredRecord{live: 1, liveBytes: 1500, blockBytes: recs[1].blockBytes}.encode(), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Verify(); err != nil || rep.Clean() {
		t.Fatalf("verify missed the wrong count: %v %+v", err, rep)
	}
	recounts := s.Metrics().RetiredRecounts
	// Overwriting a brings the count to 0: the block must not go, b lives
	// in it.
	mustWrite(t, s, set("a", "small"))
	if !blockExists(t, s, 1) {
		t.Fatal("block 1 deleted while b's record points into it")
	}
	if v, _, ok := get(t, s, "b"); !ok || v != string(pattern(2, 4000)) {
		t.Fatalf("b reads %d bytes (found %v)", len(v), ok)
	}
	if s.Metrics().RetiredRecounts != recounts+1 {
		t.Fatal("recount not counted")
	}
	mustVerify(t, s)
}

// Verify reports retired block records that disagree with the database.
func TestVerifyRetiredProblems(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"record without block", "count", "totals", "block without record"} {
		t.Run(damage, func(t *testing.T) {
			s := openTest(t, Options{Name: "retired-verify", Retention: Retention{MaxEntries: 1}})
			mustWrite(t, s, setb("a", pattern(1, 3000)))
			mustWrite(t, s, set("f", "x"))
			recs, tot := retiredOnDisk(t, s)
			if len(recs) != 1 {
				t.Fatalf("no retired block: %+v", recs)
			}
			mustVerify(t, s)
			var err error
			switch damage {
			case "record without block":
				err = s.db.Delete(logKey(1), pebble.Sync)
			case "count":
				r := recs[1]
				r.live++
				err = s.db.Set(retiredKey(1), r.encode(), pebble.Sync)
			case "totals":
				tot.bytes++
				err = s.db.Set(metaRetired, tot.encode(), pebble.Sync)
			case "block without record":
				err = s.db.Delete(retiredKey(1), pebble.Sync)
			}
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s.Verify()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Clean() {
				t.Fatalf("verify missed: %s", damage)
			}
			t.Logf("%s:\n%s", damage, problemList(rep))
		})
	}
}

// Power loss while blocks are retired, counted down and freed: one writer
// sets, overwrites and deletes large values on a small key space with a
// short log. The image verifies (retired records included) and holds
// exactly the writes up to its applied index, which covers every
// acknowledged one.
func TestPowerLossRetiredBlocks(t *testing.T) {
	t.Parallel()
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	base := uint64(time.Now().UnixNano())
	t.Logf("base seed %d", base)
	for r := range rounds {
		seed := base + uint64(r)
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { retiredPowerLossRound(t, seed) })
	}
}

func retiredPowerLossRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewCrashableMem()
	o := Options{Name: "crash-retired", Dir: "/data/db", FS: fs, MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger(),
		Retention: Retention{MaxEntries: int64(2 + rng.IntN(6)), MaxBytes: -1, MaxAge: -1}}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	// The writes, decided up front: write i is entry i+1.
	const keys = 12
	type write struct{ ops []wal.Op }
	var writes []write
	present := map[string]bool{}
	for i := range 400 {
		var w write
		for j := range 1 + rng.IntN(3) {
			k := fmt.Sprint("k", rng.IntN(keys))
			if present[k] && rng.IntN(3) == 0 && !touched(w.ops, k) {
				w.ops = append(w.ops, del(k))
				present[k] = false
				continue
			}
			w.ops = append(w.ops, setb(k, pattern(i*10+j, 1024+rng.IntN(3000))))
			present[k] = true
		}
		writes = append(writes, w)
	}
	acked := make(chan uint64, len(writes))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, w := range writes {
			r, err := s.Write(context.Background(), Batch{Ops: w.ops})
			if err != nil {
				return
			}
			acked <- r.Index
		}
	}()
	target := 1 + rng.IntN(len(writes)-1)
	var maxAcked uint64
	for maxAcked < uint64(target) {
		maxAcked = <-acked
	}
	image := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	s.Close()
	<-done

	o.FS = image
	rep, err := Verify(o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("verify of the crash image (after %d acks):\n%s", maxAcked, problemList(rep))
	}
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	applied := s2.AppliedIndex()
	if applied < maxAcked || applied > uint64(len(writes)) {
		t.Fatalf("applied %d after %d acks", applied, maxAcked)
	}
	want := map[string]string{}
	for _, w := range writes[:applied] {
		for _, op := range w.ops {
			if op.Type == wal.OpSet {
				want[string(op.Key)] = string(op.Value)
			} else {
				delete(want, string(op.Key))
			}
		}
	}
	for k := range keys {
		key := fmt.Sprint("k", k)
		got, _, ok := get(t, s2, key)
		if w, wok := want[key]; ok != wok || got != w {
			t.Fatalf("%s after the crash at %d: %d bytes (found %v), want %d bytes (found %v)", key, applied, len(got), ok, len(w), wok)
		}
	}
	// Writing on after the crash keeps counting blocks right.
	for i := range 20 {
		mustWrite(t, s2, setb(fmt.Sprint("k", i%keys), pattern(100000+i, 1500)))
	}
	mustVerify(t, s2)
}

func touched(ops []wal.Op, k string) bool {
	for _, op := range ops {
		if string(op.Key) == k {
			return true
		}
	}
	return false
}

// Two sets of one key in one batch: only the last one's value is live in
// the block, and the block's count says so.
func TestRetiredBlockKeyTwiceInAnEntry(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "retired-twice", Retention: Retention{MaxEntries: 1}})
	mustWrite(t, s, setb("k", pattern(1, 3000)), setb("k", pattern(2, 3500)), setb("j", pattern(3, 3000)))
	mustWrite(t, s, set("f", "x"))
	recs, _ := retiredOnDisk(t, s)
	if r := recs[1]; r.live != 2 || r.liveBytes != 6500 {
		t.Fatalf("block 1: %+v, want 2 live values of 6500 bytes", r)
	}
	if v, _, _ := get(t, s, "k"); v != string(pattern(2, 3500)) {
		t.Fatal("k is not the batch's last value")
	}
	mustVerify(t, s)
}

// TestRetiredSettleGoesPastABadBlock: a retired block that cannot be
// freed (here: gone from the database) does not keep the other blocks
// the same group counted down from being settled.
func TestRetiredSettleGoesPastABadBlock(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "retired-bad", Retention: Retention{MaxEntries: 2}, History: noHistory, Logger: quietLogger()})
	mustWrite(t, s, setb("a", pattern(1, 3000)), setb("b", pattern(2, 3000))) // block 1
	mustWrite(t, s, setb("c", pattern(3, 3000)), setb("d", pattern(4, 3000))) // block 2
	mustWrite(t, s, setb("e", pattern(5, 3000)), setb("f", pattern(6, 3000))) // block 3
	for i := range 3 {
		mustWrite(t, s, set(fmt.Sprint("x", i), "x"))
	}
	recs, _ := retiredOnDisk(t, s)
	for _, b := range []uint64{1, 2, 3} {
		if r, ok := recs[b]; !ok || r.live != 2 {
			t.Fatalf("block %d not retired with 2 live values: %+v", b, recs)
		}
	}
	rawDelete(t, s, logKey(1))
	// One group: block 1 goes empty (its free fails), blocks 2 and 3 each
	// lose one of two values.
	mustWrite(t, s, set("a", "1"), set("b", "2"), set("c", "3"), set("e", "4"))
	recs, _ = retiredOnDisk(t, s)
	if r, ok := recs[1]; !ok || r.live != 0 {
		t.Fatalf("block 1 (missing) should keep its lowered count 0: %+v", recs[1])
	}
	for _, b := range []uint64{2, 3} {
		if r, ok := recs[b]; ok && r.live != 1 {
			t.Fatalf("block %d: count %d, want 1 (or freed)", b, r.live)
		}
	}
	for _, k := range []string{"d", "f"} {
		if _, _, ok := get(t, s, k); !ok {
			t.Fatalf("%s unreadable", k)
		}
	}
}
