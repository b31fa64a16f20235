package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// versionModel is the state of every key at every index, rebuilt from a
// log: for each key, its changes in index order.
type versionModel struct {
	changes map[string][]modelChange
}

type modelChange struct {
	index uint64
	value []byte // nil: deleted
	found bool
}

func newVersionModel() *versionModel { return &versionModel{changes: map[string][]modelChange{}} }

// apply adds the ops of a log entry. Within an entry the last op on a key
// wins.
func (m *versionModel) apply(e wal.Entry) {
	for _, op := range e.Ops {
		ch := m.changes[string(op.Key)]
		c := modelChange{index: e.Index, found: op.Type == wal.OpSet, value: append([]byte{}, op.Value...)}
		if n := len(ch); n > 0 && ch[n-1].index == e.Index {
			ch[n-1] = c
		} else {
			ch = append(ch, c)
		}
		m.changes[string(op.Key)] = ch
	}
}

// at returns the value of key at index p and the index of its write.
func (m *versionModel) at(key string, p uint64) ([]byte, uint64, bool) {
	var cur *modelChange
	for i := range m.changes[key] {
		c := &m.changes[key][i]
		if c.index > p {
			break
		}
		cur = c
	}
	if cur == nil || !cur.found {
		return nil, 0, false
	}
	return cur.value, cur.index, true
}

// readModel replays the whole log of s.
func readModel(t *testing.T, s *Store) *versionModel {
	t.Helper()
	m := newVersionModel()
	for from := uint64(1); from <= s.AppliedIndex(); {
		es, err := s.ReadLog(from, 1000, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			m.apply(e)
		}
		from = es[len(es)-1].Index + 1
	}
	return m
}

// randomHistoryOps writes n random batches on a small hot keyspace: sets of
// inline, in-log and chunked sizes, overwrites, deletes and re-creates,
// set-then-delete of one key in one batch, and heartbeats.
func randomHistoryOps(t *testing.T, s *Store, rng *rand.Rand, n int) {
	t.Helper()
	randomOps(t, s, rng, n, 8)
}

// randomOps is randomHistoryOps on keys k0..k<nkeys-1>.
func randomOps(t *testing.T, s *Store, rng *rand.Rand, n, nkeys int) {
	t.Helper()
	sizes := []int{0, 7, 100, 1500, 3000, 9000}
	for i := 0; i < n; i++ {
		if rng.IntN(10) == 0 {
			if _, err := s.Heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var ops []wal.Op
		for j := rng.IntN(3) + 1; j > 0; j-- {
			k := fmt.Sprintf("k%d", rng.IntN(nkeys))
			switch r := rng.IntN(10); {
			case r < 6:
				ops = append(ops, setb(k, pattern(rng.IntN(1<<20), sizes[rng.IntN(len(sizes))])))
			case r < 9:
				ops = append(ops, del(k))
			default:
				ops = append(ops, setb(k, pattern(rng.IntN(1<<20), 50)), del(k))
			}
		}
		if _, err := s.Write(context.Background(), Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAsOf checks GetAt for every key (and one never written) at every
// index from the horizon to the applied index, the refusals below the
// horizon and above the applied index, against the model.
func checkAsOf(t *testing.T, s *Store, m *versionModel) (checked int) {
	t.Helper()
	keys := []string{"never"}
	for i := 0; i < 8; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	return checkAsOfKeys(t, s, m, keys)
}

// checkAsOfKeys is checkAsOf for the given keys.
func checkAsOfKeys(t *testing.T, s *Store, m *versionModel, keys []string) (checked int) {
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
	for _, k := range keys {
		for p := h.Horizon; p <= v.Index(); p++ {
			val, idx, found, err := v.GetAt([]byte(k), p)
			if err != nil {
				t.Fatalf("%s as of %d (horizon %d, applied %d): %v", k, p, h.Horizon, v.Index(), err)
			}
			wv, wi, wf := m.at(k, p)
			if found != wf || idx != wi || !bytes.Equal(val, wv) {
				t.Fatalf("%s as of %d: got found=%v index=%d len=%d, want found=%v index=%d len=%d", k, p, found, idx, len(val), wf, wi, len(wv))
			}
			checked++
		}
		if _, _, _, err := v.GetAt([]byte(k), v.Index()+1); !errors.Is(err, ErrNotYetApplied) {
			t.Fatalf("%s as of applied+1: %v, want ErrNotYetApplied", k, err)
		}
		if h.Horizon > 0 {
			// Below the horizon: refused, unless the current version
			// already covers it (then it is the answer whatever the history).
			_, wi, wf := m.at(k, v.Index())
			_, _, _, err := v.GetAt([]byte(k), h.Horizon-1)
			if covered := wf && wi <= h.Horizon-1; !covered && !errors.Is(err, ErrHistoryTruncated) {
				t.Fatalf("%s as of %d below horizon %d: %v, want ErrHistoryTruncated", k, h.Horizon-1, h.Horizon, err)
			}
		}
	}
	return checked
}

// TestHistoryModel is the model test of the MVCC history: random writes on
// a hot keyspace, and after each round every key is read as of every
// index the history covers, on the root and on a replica that applied the
// same log, and compared with a replay of the log. Then again after a
// restart (the history is durable with the data).
func TestHistoryModel(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			dir := t.TempDir()
			o := Options{Dir: dir, ChunkBytes: 4096, Logger: quietLogger()}
			root := openTest(t, o)
			replica := openTest(t, Options{DBID: root.DBID(), ChunkBytes: 4096, Logger: quietLogger()})
			checked := 0
			for round := 0; round < 6; round++ {
				randomHistoryOps(t, root, rng, 60)
				replicate(t, root, replica, 1+rng.IntN(20))
				m := readModel(t, root)
				checked += checkAsOf(t, root, m)
				checked += checkAsOf(t, replica, m)
			}
			mustVerify(t, root)
			mustVerify(t, replica)
			h, _ := root.History()
			if h.Horizon != 0 || h.Entries == 0 {
				t.Fatalf("history %+v: want horizon 0 and versions", h)
			}
			root.Close()
			root = openTest(t, o)
			checked += checkAsOf(t, root, readModel(t, root))
			t.Logf("%d reads as of an index checked; %d versions in %d bytes", checked, h.Entries, h.Bytes)
		})
	}
}

// TestHistoryGCBySize caps the history: the horizon rises, reads at or
// above it stay exact, reads below it are refused, and the counters stay
// exact (Verify recounts them).
func TestHistoryGCBySize(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 9))
	s := openTest(t, Options{ChunkBytes: 4096, History: HistoryOptions{MaxBytes: 20 << 10}, Logger: quietLogger()})
	var horizons []uint64
	for round := 0; round < 8; round++ {
		randomHistoryOps(t, s, rng, 50)
		checkAsOf(t, s, readModel(t, s))
		h, _ := s.History()
		if h.Bytes > 20<<10+16<<10 {
			t.Fatalf("history of %d bytes, cap 20 KiB", h.Bytes)
		}
		horizons = append(horizons, h.Horizon)
		mustVerify(t, s)
	}
	if horizons[len(horizons)-1] == 0 {
		t.Fatalf("horizon never rose: %v", horizons)
	}
	if c := s.Metrics().HistoryCollected; c == 0 {
		t.Fatal("no version collected")
	}
}

// TestHistoryGCByAge keeps versions for the retention by the log's clock:
// after the clock moves past it, the next commits collect them.
func TestHistoryGCByAge(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := openTest(t, Options{Now: clock, History: HistoryOptions{Retention: time.Hour}, Logger: quietLogger()})
	for i := 0; i < 20; i++ {
		mustWrite(t, s, set("a", fmt.Sprint(i)))
	}
	old := s.AppliedIndex()
	advance(30 * time.Minute)
	mustWrite(t, s, set("a", "x"))
	if h, _ := s.History(); h.Horizon != 0 {
		t.Fatalf("horizon %d before the retention passed", h.Horizon)
	}
	advance(31 * time.Minute)
	// GC runs at most once a second of wall time.
	deadline := time.Now().Add(60 * time.Second)
	for {
		mustWrite(t, s, set("b", fmt.Sprint(time.Now().UnixNano())))
		h, _ := s.History()
		if h.Horizon >= old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("horizon %d, want ≥ %d after the retention", h.Horizon, old)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkAsOf(t, s, readModel(t, s))
	mustVerify(t, s)
}

// TestHistoryEnabledLater: history switched on for an existing database
// starts at the applied index; switched off, it is dropped.
func TestHistoryEnabledLater(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{Dir: dir, History: HistoryOptions{Retention: -1}, Logger: quietLogger()}
	s := openTest(t, o)
	mustWrite(t, s, set("a", "1"))
	mustWrite(t, s, set("a", "2"))
	if h, _ := s.History(); h.Enabled || h.Entries != 0 {
		t.Fatalf("disabled history: %+v", h)
	}
	v, _ := s.View()
	if _, _, _, err := v.GetAt([]byte("a"), 1); !errors.Is(err, ErrHistoryTruncated) {
		t.Fatalf("as of 1 without history: %v", err)
	}
	v.Close()
	s.Close()
	o.History = HistoryOptions{}
	s = openTest(t, o)
	if h, _ := s.History(); !h.Enabled || h.Horizon != 2 {
		t.Fatalf("history enabled at index 2: %+v", h)
	}
	mustWrite(t, s, set("a", "3"))
	checkAsOf(t, s, readModel(t, s))
	s.Close()
	o.History = HistoryOptions{Retention: -1}
	s = openTest(t, o)
	if h, _ := s.History(); h.Enabled || h.Entries != 0 || h.Horizon != 3 {
		t.Fatalf("history disabled again: %+v", h)
	}
	mustVerify(t, s)
}

// TestHistoryTravelsWithSnapshots: a checkpoint carries the history and
// its horizon, so a bootstrapped replica answers as of the same indexes.
func TestHistoryTravelsWithSnapshots(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(4, 4))
	root := openTest(t, Options{ChunkBytes: 4096, Logger: quietLogger()})
	randomHistoryOps(t, root, rng, 100)
	dir := t.TempDir() + "/snap"
	if _, err := root.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	copyOpen := openTest(t, Options{Dir: dir, ChunkBytes: 4096, Logger: quietLogger()})
	checkAsOf(t, copyOpen, readModel(t, root))
}

// TestHistoryLostVersion: a corrupt value that is overwritten leaves a
// lost version: reads as of its time fail with ErrCorrupt, never serve
// something else.
func TestHistoryLostVersion(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, s, set("a", "good"))
	raw := rawGet(t, s, dataKey(nil, []byte("a")))
	rawSet(t, s, dataKey(nil, []byte("a")), flip(raw, len(raw)-1))
	mustWrite(t, s, set("a", "repaired"))
	v, _ := s.View()
	defer v.Close()
	if _, _, _, err := v.GetAt([]byte("a"), 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("as of the corrupt version: %v, want ErrCorrupt", err)
	}
	if val, idx, ok, err := v.GetAt([]byte("a"), 2); err != nil || !ok || idx != 2 || string(val) != "repaired" {
		t.Fatalf("as of 2: %q %d %v %v", val, idx, ok, err)
	}
}
