package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestPowerLoss runs concurrent writers on a crashable in-memory
// filesystem, takes a crash image at a random moment (keeping a random
// share of the data that was not synced), reopens the store on the image
// and checks that
//
//   - every write acknowledged before the image was taken is there, with
//     its value and its index;
//   - every batch is there whole or not at all, and each writer's batches
//     form a prefix of what it sent (a later batch never without an
//     earlier one);
//   - the log holds exactly the entries of the batches present, chained;
//   - the applied index is at least the highest acknowledged one, Verify
//     finds nothing, and new writes continue at applied+1.
//
// Every key is written by one batch only (plus one overwritten key and one
// deleted key per writer, whose expected state is exact too), so the check
// needs no model of interleavings.
func TestPowerLoss(t *testing.T) {
	t.Parallel()
	rounds := 30
	if testing.Short() {
		rounds = 5
	}
	base := uint64(time.Now().UnixNano())
	t.Logf("base seed %d", base)
	var counts crashCounts
	for r := 0; r < rounds; r++ {
		seed := base + uint64(r)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { powerLossRound(t, seed, &counts) })
	}
	// Commits sync their log segment, not Pebble: the images lose Pebble's
	// tail, and the reopen applies it again from the segments.
	n, rec := counts.replayed, counts.recycled
	t.Logf("%v entries replayed from log segments, %v segments made of spares, in %d rounds", n, rec, rounds)
	if n == 0 && rounds >= 5 {
		t.Error("no round replayed anything from the log segments: the test does not reach the replay")
	}
	if rec == 0 && rounds >= 20 {
		t.Error("no segment made of a spare: the test does not reach recycling")
	}
}

const crashWriters = 4

// crashBatch is batch i of writer g:
//
//	w/<g>/<i>/<j>  set, j < 3; one value in five is chunked, one in five in-log
//	marker/<g>/<i> set to i
//	last/<g>       set to i (overwritten by every batch of g)
//	tmp/<g>/<i>    set; tmp/<g>/<i-1> deleted
func crashBatch(g, i int) []wal.Op {
	var ops []wal.Op
	for j := 0; j < 3; j++ {
		ops = append(ops, setb(fmt.Sprintf("w/%d/%d/%d", g, i, j), crashValue(g, i, j)))
	}
	ops = append(ops,
		set(fmt.Sprintf("marker/%d/%d", g, i), strconv.Itoa(i)),
		set(fmt.Sprintf("last/%d", g), strconv.Itoa(i)),
		set(fmt.Sprintf("tmp/%d/%d", g, i), "x"))
	if i > 0 {
		ops = append(ops, del(fmt.Sprintf("tmp/%d/%d", g, i-1)))
	}
	return ops
}

func crashValue(g, i, j int) []byte {
	switch (i + j) % 5 {
	case 0:
		return pattern(g*1_000_000+i*10+j, 10000) // 3 chunks of 4 KiB
	case 1:
		return pattern(g*1_000_000+i*10+j, 1500) // stored only in its log block
	}
	return []byte(fmt.Sprintf("v-%d-%d-%d", g, i, j))
}

// crashCounts add up what the stores of the rounds counted.
type crashCounts struct{ replayed, recycled float64 }

func (c *crashCounts) add(ms ...Metrics) {
	for _, m := range ms {
		c.replayed += m.LogReplayedEntries
		c.recycled += m.LogSegmentEvents["recycled"]
	}
}

func powerLossRound(t *testing.T, seed uint64, counts *crashCounts) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fs := vfs.NewCrashableMem()
	o := Options{
		Name: "crash", Dir: "/data/db", FS: fs, ChunkBytes: 4096,
		MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger(),
		Compression: wal.Compression(rng.IntN(3)),
	}
	if rng.IntN(2) == 0 {
		o.BatchWindow = 100 * time.Microsecond
	}
	if rng.IntN(3) == 0 {
		// Retention at work too: the image may catch a truncation.
		o.Retention = Retention{MaxEntries: 16, MaxBytes: -1, MaxAge: -1}
	}
	if rng.IntN(2) == 0 {
		// Small log segments, collected often: the image may catch a
		// segment being created or removed.
		o.segmentBytes, o.collectEvery, o.recycleAnyway = 64<<10, 2*time.Millisecond, true
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[[2]int]uint64{} // (writer, batch) -> index
	var started [crashWriters]int
	for g := range started {
		started[g] = -1
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < crashWriters; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				started[g] = i
				mu.Unlock()
				r, err := s.Write(context.Background(), Batch{Ops: crashBatch(g, i)})
				if err != nil {
					return // the store closed under us after the crash image
				}
				mu.Lock()
				acked[[2]int{g, i}] = r.Index
				mu.Unlock()
			}
		}()
	}

	// Take the image after a random number of acknowledgements, at
	// whatever point the commits in flight have reached.
	target := rng.IntN(120)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= target {
			break
		}
		time.Sleep(50 * time.Microsecond)
	}
	mu.Lock()
	ackedBefore := make(map[[2]int]uint64, len(acked))
	var maxAcked uint64
	for k, v := range acked {
		ackedBefore[k] = v
		maxAcked = max(maxAcked, v)
	}
	mu.Unlock()
	unsynced := rng.IntN(101)
	image := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rng})
	close(stop)
	s.Close()
	wg.Wait()
	mu.Lock()
	startedAt := started
	mu.Unlock()
	t.Logf("image after %d acks (highest index %d), compression %d, window %v, retention %d, %d%% of unsynced data kept",
		len(ackedBefore), maxAcked, o.Compression, o.BatchWindow, o.Retention.MaxEntries, unsynced)

	// The image verifies read-only, before anything writes to it.
	o.FS = image
	r, err := Verify(o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		t.Fatalf("verify of the crash image:\n%s", problemList(r))
	}

	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	defer func() { counts.add(s.Metrics(), s2.Metrics()) }()
	applied := s2.AppliedIndex()
	if applied < maxAcked {
		t.Fatalf("applied index %d after the crash, %d was acknowledged", applied, maxAcked)
	}
	checkCrashImage(t, s2, ackedBefore, startedAt)
	// The history survived with the data: reads as of every index agree
	// with the recovered log (when it is whole).
	if lr, err := s2.LogRange(); err == nil && lr.First == 1 {
		var keys []string
		for g := 0; g < crashWriters; g++ {
			keys = append(keys, fmt.Sprintf("last/%d", g), fmt.Sprintf("tmp/%d/%d", g, 0), fmt.Sprintf("tmp/%d/%d", g, 1))
		}
		checkAsOfKeys(t, s2, readModel(t, s2), keys)
	}

	// New writes continue the log.
	res := mustWrite(t, s2, set("after", "crash"))
	if res.Index != applied+1 {
		t.Fatalf("first write after the crash at index %d, applied was %d", res.Index, applied)
	}
	mustVerify(t, s2)
}

// checkCrashImage checks the data and the log of a recovered store against
// what the writers sent and what was acknowledged.
func checkCrashImage(t *testing.T, s *Store, acked map[[2]int]uint64, started [crashWriters]int) {
	t.Helper()
	type kv struct {
		val string
		idx uint64
	}
	keys := map[string]kv{}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Scan(nil, nil, 0, func(k, val []byte, idx uint64) error {
		keys[string(k)] = kv{string(val), idx}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	v.Close()
	applied := s.AppliedIndex()

	// Present batches per writer, by marker.
	byIndex := map[uint64][2]int{}
	var lastOf [crashWriters]int
	for g := 0; g < crashWriters; g++ {
		last := -1
		for i := 0; ; i++ {
			m, ok := keys[fmt.Sprintf("marker/%d/%d", g, i)]
			if !ok {
				break
			}
			last = i
			if m.val != strconv.Itoa(i) || m.idx == 0 || m.idx > applied {
				t.Fatalf("marker %d/%d = %q at %d (applied %d)", g, i, m.val, m.idx, applied)
			}
			if other, dup := byIndex[m.idx]; dup {
				t.Fatalf("batches %v and %d/%d both at index %d", other, g, i, m.idx)
			}
			byIndex[m.idx] = [2]int{g, i}
			if i > started[g] {
				t.Fatalf("batch %d/%d present but never sent (last sent %d)", g, i, started[g])
			}
			if want, ok := acked[[2]int{g, i}]; ok && want != m.idx {
				t.Fatalf("batch %d/%d acknowledged at %d, found at %d", g, i, want, m.idx)
			}
			for j := 0; j < 3; j++ {
				k := fmt.Sprintf("w/%d/%d/%d", g, i, j)
				got, ok := keys[k]
				if !ok || got.val != string(crashValue(g, i, j)) || got.idx != m.idx {
					t.Fatalf("partial batch %d/%d: %s present %v, index %d (marker at %d)", g, i, k, ok, got.idx, m.idx)
				}
			}
		}
		lastOf[g] = last
		// Acknowledged batches are all there: none beyond the prefix.
		for k := range acked {
			if k[0] == g && k[1] > last {
				t.Fatalf("batch %d/%d acknowledged before the crash but lost (writer %d recovered up to %d)", g, k[1], g, last)
			}
		}
		// The overwritten and the deleted key agree with the last batch.
		lk := fmt.Sprintf("last/%d", g)
		if got, ok := keys[lk]; last < 0 && ok || last >= 0 && (!ok || got.val != strconv.Itoa(last) || got.idx != keys[fmt.Sprintf("marker/%d/%d", g, last)].idx) {
			t.Fatalf("%s = %+v, writer recovered up to batch %d", lk, got, last)
		}
		for i := 0; i <= last; i++ {
			_, ok := keys[fmt.Sprintf("tmp/%d/%d", g, i)]
			if ok != (i == last) {
				t.Fatalf("tmp/%d/%d present %v, writer recovered up to batch %d", g, i, ok, last)
			}
		}
	}
	// Nothing else: no key of a batch beyond a writer's recovered prefix.
	for k := range keys {
		parts := strings.Split(k, "/")
		g, i := -1, -1
		if len(parts) > 1 {
			g, _ = strconv.Atoi(parts[1])
		}
		if len(parts) > 2 {
			i, _ = strconv.Atoi(parts[2])
		}
		ok := g >= 0 && g < crashWriters
		switch {
		case !ok:
		case parts[0] == "w" && len(parts) == 4, parts[0] == "marker" && len(parts) == 3:
			ok = i <= lastOf[g]
		case parts[0] == "tmp" && len(parts) == 3:
			ok = i == lastOf[g]
		case parts[0] == "last" && len(parts) == 2:
			ok = lastOf[g] >= 0
		default:
			ok = false
		}
		if !ok {
			t.Fatalf("key %q does not belong to a batch that is there", k)
		}
	}

	// The retained log holds exactly those batches, one entry each, in
	// index order, chained from its base hash.
	lr, err := s.LogRange()
	if err != nil {
		t.Fatal(err)
	}
	if lr.Last != applied || lr.First == 0 || lr.First > applied+1 {
		t.Fatalf("log range %+v, applied %d", lr, applied)
	}
	if applied == 0 {
		return
	}
	entries, err := s.ReadLog(lr.First, 1<<30, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(entries)) != applied-lr.First+1 {
		t.Fatalf("log %d..%d holds %d entries", lr.First, applied, len(entries))
	}
	ver := wal.Verifier{Index: lr.First - 1, Hash: lr.BaseHash}
	for i := range entries {
		e := &entries[i]
		if err := ver.Check(e); err != nil {
			t.Fatal(err)
		}
		b, ok := byIndex[e.Index]
		if !ok {
			t.Fatalf("entry %d is not a batch present in the data", e.Index)
		}
		want := crashBatch(b[0], b[1])
		if len(e.Ops) != len(want) || string(e.Ops[3].Key) != fmt.Sprintf("marker/%d/%d", b[0], b[1]) {
			t.Fatalf("entry %d does not carry batch %d/%d", e.Index, b[0], b[1])
		}
	}
	for idx, b := range byIndex {
		if idx < lr.First {
			continue
		}
		if e := entries[idx-lr.First]; string(e.Ops[3].Key) != fmt.Sprintf("marker/%d/%d", b[0], b[1]) {
			t.Fatalf("batch %d/%d at index %d is not in the log", b[0], b[1], idx)
		}
	}
	if ver.Index != applied || ver.Hash != appliedHash(t, s).hash {
		t.Fatalf("log chain ends at %d, applied %d", ver.Index, applied)
	}
}
