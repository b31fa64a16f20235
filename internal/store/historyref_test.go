package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// noHistory switches the MVCC history off, for tests of what the value
// records alone do to log blocks.
var noHistory = HistoryOptions{Retention: -1}

// versionLog is what a test wrote: per key, its versions in order.
type versionLog map[string][]struct {
	index uint64
	value []byte // nil: deleted
}

func (m versionLog) at(k string, p uint64) ([]byte, uint64, bool) {
	vs := m[k]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].index <= p {
			return vs[i].value, vs[i].index, vs[i].value != nil
		}
	}
	return nil, 0, false
}

// checkVersions reads every key as of every index from the horizon on.
func checkVersions(t *testing.T, s *Store, m versionLog) {
	t.Helper()
	h, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for k := range m {
		for p := h.Horizon; p <= v.Index(); p++ {
			val, idx, found, err := v.GetAt([]byte(k), p)
			if err != nil {
				t.Fatalf("%s as of %d (horizon %d): %v", k, p, h.Horizon, err)
			}
			wv, wi, wf := m.at(k, p)
			if found != wf || (found && (idx != wi || !bytes.Equal(val, wv))) {
				t.Fatalf("%s as of %d: found=%v index=%d len=%d, want found=%v index=%d len=%d", k, p, found, idx, len(val), wf, wi, len(wv))
			}
		}
	}
}

// historyRecordAt returns the history record of key's version ending at
// until.
func historyRecordAt(t *testing.T, s *Store, key string, until uint64) record {
	t.Helper()
	rec, err := decodeRecord(rawGet(t, s, histVersionKey(nil, []byte(key), until)))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// An overwritten value stored in its log block is not copied into the
// history: the version points at the log's copy, and reads as of its time
// return it.
func TestHistoryPointsIntoTheLog(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "hist-ref"})
	refs := s.Metrics().HistoryLogReferences
	big := pattern(1, 5000)
	w := mustWrite(t, s, setb("a", big))
	o := mustWrite(t, s, set("a", "small"))
	d := mustWrite(t, s, setb("b", pattern(2, 3000)))
	mustWrite(t, s, del("b"))
	rec := historyRecordAt(t, s, "a", o.Index)
	if rec.kind != recInLog || rec.block != w.Index || rec.index != w.Index || rec.valueLen != len(big) {
		t.Fatalf("version of a: %+v, want an in-log record into block %d", rec, w.Index)
	}
	if rec := historyRecordAt(t, s, "b", d.Index+1); rec.kind != recInLog {
		t.Fatalf("version of deleted b: kind %d, want in-log", rec.kind)
	}
	if n := s.Metrics().HistoryLogReferences - refs; n != 2 {
		t.Fatalf("history_log_references_total rose by %v, want 2", n)
	}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, idx, found, err := v.GetAt([]byte("a"), w.Index)
	if err != nil || !found || idx != w.Index || !bytes.Equal(got, big) {
		t.Fatalf("a as of %d: %d bytes, index %d, found %v, %v", w.Index, len(got), idx, found, err)
	}
	h, _ := s.History()
	// Counted as if the value were inline: two versions, their keys and
	// records, and their GC entries.
	if want := int64(historySize(len(histVersionKey(nil, []byte("a"), 1)), 5000) + historySize(len(histVersionKey(nil, []byte("b"), 1)), 3000)); h.Bytes <= want {
		t.Fatalf("history counts %d bytes, want more than the versions' %d", h.Bytes, want)
	}
	mustVerify(t, s)
}

// Versions keep the blocks they point into after the log drops them
// (retired), history GC counts them down and frees them, and a block
// dropped with few references left has them copied out inline. Reads as
// of every index stay exact throughout, and Verify agrees with the counts.
func TestHistoryRefsAcrossRetention(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "hist-retire", Dir: dir, Compression: wal.CompressNone, Retention: Retention{MaxEntries: 6}, Logger: quietLogger()}
	s := openTest(t, o)
	rng := rand.New(rand.NewPCG(3, 4))
	m := versionLog{}
	sizes := []int{50, 1500, 3000, 9000}
	write := func(n int) {
		for range n {
			// 1 to 3 ops on distinct keys in one entry, so blocks hold
			// several values.
			var ops []wal.Op
			var vals [][]byte
			first := rng.IntN(6)
			for j := range rng.IntN(3) + 1 {
				k := fmt.Sprintf("k%d", (first+j)%6)
				var val []byte
				op := del(k)
				if rng.IntN(5) > 0 {
					val = pattern(rng.IntN(1<<20), sizes[rng.IntN(len(sizes))])
					op = setb(k, val)
				}
				ops, vals = append(ops, op), append(vals, val)
			}
			r := mustWrite(t, s, ops...)
			if !r.Changed {
				continue
			}
			for j, op := range ops {
				k := string(op.Key)
				vs := m[k]
				if (len(vs) == 0 || vs[len(vs)-1].value == nil) && vals[j] == nil {
					continue // a delete of a missing key
				}
				m[k] = append(vs, struct {
					index uint64
					value []byte
				}{r.Index, vals[j]})
			}
		}
	}
	var retiredSeen bool
	for range 6 {
		write(40)
		if _, tot := retiredOnDisk(t, s); tot.blocks > 0 {
			retiredSeen = true
		}
		checkVersions(t, s, m)
		mustVerify(t, s)
	}
	if !retiredSeen {
		t.Fatal("no block retired for the history")
	}
	h, _ := s.History()
	if h.Horizon != 0 {
		t.Fatalf("horizon %d: nothing should have been collected yet", h.Horizon)
	}

	// A small history cap: GC removes the old versions and frees the
	// blocks only they held.
	s.Close()
	o.History = HistoryOptions{MaxBytes: 1 << 10}
	s = openTest(t, o)
	write(40)
	h, _ = s.History()
	if h.Horizon == 0 {
		t.Fatal("history not collected")
	}
	checkVersions(t, s, m)
	mustVerify(t, s)
	if s.Metrics().RetiredBlocksFreed == 0 { // since the reopen
		t.Fatal("no retired block freed once its versions were collected")
	}
}

// setupRetiredForHistory writes a value in a block of its own, overwrites
// it and pushes the block out of a 2-entry log: it is retired, held by the
// version alone. It returns the block and the index the version ended at.
func setupRetiredForHistory(t *testing.T, s *Store) (block, until uint64) {
	t.Helper()
	block = mustWrite(t, s, setb("a", pattern(7, 6000))).Index
	until = mustWrite(t, s, set("a", "new")).Index
	for i := range 3 {
		mustWrite(t, s, set("x", fmt.Sprint(i)))
	}
	recs, _ := retiredOnDisk(t, s)
	if r, ok := recs[block]; !ok || r.live != 1 || r.liveBytes != 6000 {
		t.Fatalf("block %d retired: %+v, %v; want 1 live value of 6000 bytes", block, r, ok)
	}
	return block, until
}

// A version whose block is damaged or gone reads as an integrity error,
// never as a wrong value, and Verify reports it.
func TestHistoryRefDamagedBlock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, s *Store, b uint64)
	}{
		{"bit flip", func(t *testing.T, s *Store, b uint64) { flipSegmentByte(t, s, b, segmentRef(t, s, b).n-100) }},
		{"block gone", func(t *testing.T, s *Store, b uint64) { rawDelete(t, s, logKey(b)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t, Options{Name: "hist-damage", Compression: wal.CompressNone, Retention: Retention{MaxEntries: 2}, Logger: quietLogger()})
			b, until := setupRetiredForHistory(t, s)
			c.damage(t, s, b)
			before := integrityErrors(s, "log_value_crc")
			v, err := s.View()
			if err != nil {
				t.Fatal(err)
			}
			val, _, _, err := v.GetAt([]byte("a"), until-1)
			v.Close()
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("read of the damaged version: %d bytes, err %v; want ErrCorrupt", len(val), err)
			}
			if c.name == "bit flip" && integrityErrors(s, "log_value_crc") != before+1 {
				t.Fatal("integrity error not counted")
			}
			r, err := s.Verify()
			if err != nil {
				t.Fatal(err)
			}
			if findProblem(r, ProblemHistory, []byte("a")) == nil {
				t.Fatalf("verify did not report the version:\n%s", problemList(r))
			}
		})
	}
}

// Switching the history off drops the versions the retired blocks were
// counted for: the next open recounts them (Verify agrees), and the next
// commit frees the blocks left with nothing live.
func TestHistoryOffRecountsRetired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "hist-off", Dir: dir, Compression: wal.CompressNone, Retention: Retention{MaxEntries: 2}, Logger: quietLogger()}
	s := openTest(t, o)
	b, _ := setupRetiredForHistory(t, s)
	s.Close()
	o.History = noHistory
	s = openTest(t, o)
	recs, _ := retiredOnDisk(t, s)
	if r := recs[b]; r.live != 0 || r.liveBytes != 0 {
		t.Fatalf("block %d after the history was dropped: %+v, want nothing live", b, r)
	}
	mustVerify(t, s)
	mustWrite(t, s, set("y", "1"))
	if blockExists(t, s, b) {
		t.Fatalf("block %d kept with nothing live", b)
	}
	if _, tot := retiredOnDisk(t, s); tot.blocks != 0 {
		t.Fatalf("retired totals %+v, want none", tot)
	}
	mustVerify(t, s)
	if n := s.Metrics().RetiredRecounts; n != 0 { // since the reopen
		t.Fatalf("%v counts corrected by the committer, want 0 (the open recounted)", n)
	}
}

// A database written with the previous storage format opens, reads, and
// is marked with the current one; an unknown format is refused.
func TestStorageFormatUpgrade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Name: "format", Dir: dir, Logger: quietLogger()}
	s := openTest(t, o)
	mustWrite(t, s, set("a", "1"))
	rawSet(t, s, metaFormat, []byte{oldFormatVersion})
	if r := mustVerify(t, s); r == nil {
		t.Fatal("no report")
	}
	s.Close()
	s = openTest(t, o)
	if got, _, _ := get(t, s, "a"); got != "1" {
		t.Fatalf("a = %q after the upgrade", got)
	}
	if f := rawGet(t, s, metaFormat); !bytes.Equal(f, []byte{formatVersion}) {
		t.Fatalf("format %x after opening, want %02x", f, formatVersion)
	}
	rawSet(t, s, metaFormat, []byte{formatVersion + 1})
	s.Close()
	o.MinFreeBytes, o.BallastBytes = 1, -1
	if _, err := Open(o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of an unknown format: %v, want ErrCorrupt", err)
	}
}

// A retired block whose history versions are collected until less than
// half of it is live is dropped, the versions left copied out inline: they
// read the same, and the history's size does not change.
func TestHistoryRefCopiedOutWhenBlockDropped(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := openTest(t, Options{Name: "hist-copy", Now: clock, Compression: wal.CompressNone, Retention: Retention{MaxEntries: 2},
		History: HistoryOptions{Retention: time.Hour}, Logger: quietLogger()})
	a := pattern(1, 1500)
	block := mustWrite(t, s, setb("a", a), setb("b", pattern(2, 6000))).Index
	mustWrite(t, s, set("b", "new")) // b's version, the older one
	advance(30 * time.Minute)
	ua := mustWrite(t, s, set("a", "new")).Index
	for i := range 3 {
		mustWrite(t, s, set("x", fmt.Sprint(i)))
	}
	recs, _ := retiredOnDisk(t, s)
	if r := recs[block]; r.live != 2 {
		t.Fatalf("block %d: %+v, want 2 live versions", block, r)
	}
	copied := s.Metrics().ValuesMaterialized
	advance(31 * time.Minute) // b's version is now past the retention
	deadline := time.Now().Add(60 * time.Second)
	for blockExists(t, s, block) {
		if time.Now().After(deadline) {
			h, _ := s.History()
			t.Fatalf("block %d still there; history %+v", block, h)
		}
		mustWrite(t, s, set("y", fmt.Sprint(time.Now().UnixNano())))
		time.Sleep(50 * time.Millisecond) // history GC runs at most once a second
	}
	if rec := historyRecordAt(t, s, "a", ua); rec.kind != recInline {
		t.Fatalf("a's version after its block went: kind %d, want inline", rec.kind)
	}
	if s.Metrics().ValuesMaterialized != copied+1 {
		t.Fatal("copy not counted")
	}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	got, idx, found, err := v.GetAt([]byte("a"), ua-1)
	v.Close()
	if err != nil || !found || idx != block || !bytes.Equal(got, a) {
		t.Fatalf("a as of %d: %d bytes, index %d, found %v, %v", ua-1, len(got), idx, found, err)
	}
	mustVerify(t, s)
}

// Concurrent writers make groups of several entries, in which a key is
// overwritten more than once, versions are recorded and collected, and
// blocks leave the log: the retired counts stay exact (Verify recounts
// them), and every version from the horizon on reads without error.
func TestHistoryRefsConcurrentWriters(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "hist-concurrent", Compression: wal.CompressNone, Retention: Retention{MaxEntries: 6},
		History: HistoryOptions{MaxBytes: 48 << 10}, Logger: quietLogger()})
	sizes := []int{40, 1100, 2500, 7000}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range 150 {
				k := fmt.Sprintf("k%d", rng.IntN(6))
				op := del(k)
				if rng.IntN(4) > 0 {
					op = setb(k, pattern(rng.IntN(1<<20), sizes[rng.IntN(len(sizes))]))
				}
				if _, err := writeBatch(t.Context(), s, op, setb(fmt.Sprintf("w%d", w), pattern(w, 1200))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustVerify(t, s)
	h, _ := s.History()
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for i := range 6 {
		for p := h.Horizon; p <= v.Index(); p++ {
			if _, _, _, err := v.GetAt([]byte(fmt.Sprintf("k%d", i)), p); err != nil {
				t.Fatalf("k%d as of %d: %v", i, p, err)
			}
		}
	}
}

// The GC entry of a version in a log block names the block, so that GC
// counts it down without reading the version; Verify checks it.
func TestHistoryGCEntryNamesTheBlock(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "hist-gc-entry", Logger: quietLogger()})
	w := mustWrite(t, s, setb("a", pattern(3, 4000))).Index
	u := mustWrite(t, s, set("a", "x")).Index
	tk := histTimeKey(nil, u, []byte("a"))
	g, ok := parseHistGC(rawGet(t, s, tk))
	if !ok || !g.inLog || g.block != w || g.index != w {
		t.Fatalf("GC entry %+v (ok %v), want block and index %d", g, ok, w)
	}
	mustVerify(t, s)
	tv := binary.BigEndian.AppendUint64(nil, uint64(g.time))
	tv = binary.AppendUvarint(tv, g.size)
	tv = binary.AppendUvarint(tv, w+1) // another block
	tv = binary.AppendUvarint(tv, w)
	rawSet(t, s, tk, tv)
	r, err := s.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if findProblem(r, ProblemHistory, []byte("a")) == nil {
		t.Fatalf("verify missed a GC entry naming the wrong block:\n%s", problemList(r))
	}
}
