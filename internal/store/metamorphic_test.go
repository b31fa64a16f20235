package store

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// The metamorphic fault test runs random operations (batches of writes
// and deletes, conditional writes, batches with an ID retried, reads,
// restarts, compactions) on stores with random options
// (chunk sizes, history on or off, small log segments, retention,
// compression, read cache) while random I/O faults are injected (reads of
// any file, writes and syncs of Pebble's tables and the store's log
// segments, failing with a given probability), and checks every result
// against a model of what each key may hold:
//
//   - a write acknowledged is the key's only allowed value until the next
//     write of it; a write that failed adds its value to what the key may
//     hold (it may or may not have been made durable), never silently
//     replaces it;
//   - no read returns a value the model does not allow;
//   - with the faults stopped and the store reopened, every key holds an
//     allowed value (every acknowledged write is there) and Verify finds
//     no problem.
//
// Faults on writes of Pebble's own log and manifest are left out: Pebble
// stops the process on those by design (the store restarts from its
// durable state, as the power-loss tests check).
//
// Each round is seeded; a failure prints the seed. Replay one with
// -meta.seed=N (or QS_META_SEED=N); -meta.rounds=N (or QS_BENCH=1) runs
// more rounds, -short fewer.

var (
	metaSeed   = flag.Uint64("meta.seed", 0, "run the metamorphic fault test with this seed only")
	metaRounds = flag.Int("meta.rounds", 0, "rounds of the metamorphic fault test (default: 2 with -short, 6, or 40 with QS_BENCH=1)")
)

func TestMetamorphicFaults(t *testing.T) {
	seed := *metaSeed
	if s := os.Getenv("QS_META_SEED"); s != "" && seed == 0 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QS_META_SEED=%q: %v", s, err)
		}
		seed = v
	}
	if seed != 0 {
		t.Logf("seed %d", seed)
		metaRound(t, seed, 400)
		return
	}
	rounds, ops := 6, 300
	switch {
	case *metaRounds > 0:
		rounds = *metaRounds
	case os.Getenv("QS_BENCH") == "1":
		rounds, ops = 40, 600
	case testing.Short():
		rounds, ops = 2, 200
	}
	base := uint64(time.Now().UnixNano())
	for i := 0; i < rounds; i++ {
		seed := base + uint64(i)*0x9e3779b97f4a7c15
		if seed == 0 {
			seed = 1
		}
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { metaRound(t, seed, ops) })
		if !ok {
			t.Logf("replay with: go test ./internal/store -run TestMetamorphicFaults -meta.seed=%d", seed)
			return
		}
	}
}

// faultInjector fails reads of any file, and writes and syncs of tables
// and log segments, each with its probability, while on.
type faultInjector struct {
	mu            sync.Mutex
	rng           *rand.Rand
	on            bool
	readP, writeP float64
	reads, writes int
}

func (f *faultInjector) String() string { return "random faults" }

func (f *faultInjector) set(on bool) {
	f.mu.Lock()
	f.on = on
	f.mu.Unlock()
}

func (f *faultInjector) MaybeError(op errorfs.Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on {
		return nil
	}
	name := path.Base(op.Path)
	switch op.Kind {
	case errorfs.OpFileRead, errorfs.OpFileReadAt:
		if f.rng.Float64() < f.readP {
			f.reads++
			return errorfs.ErrInjected
		}
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpCreate:
		if !strings.HasSuffix(name, ".sst") && !strings.HasSuffix(name, segSuffix) {
			return nil
		}
		if f.rng.Float64() < f.writeP {
			f.writes++
			return errorfs.ErrInjected
		}
	}
	return nil
}

// metaModel is what each key may hold.
type metaModel map[string]*allowed

type allowed struct {
	absent bool
	vals   map[string]bool
}

func (m metaModel) get(k string) *allowed {
	a := m[k]
	if a == nil {
		a = &allowed{absent: true, vals: map[string]bool{}}
		m[k] = a
	}
	return a
}

func (a *allowed) String() string {
	var s []string
	if a.absent {
		s = append(s, "absent")
	}
	for v := range a.vals {
		s = append(s, fmt.Sprintf("%d bytes %.12q", len(v), v))
	}
	return strings.Join(s, ", ")
}

func (a *allowed) allows(found bool, v []byte) bool {
	if !found {
		return a.absent
	}
	return a.vals[string(v)]
}

// apply records a batch: acknowledged, each key's outcome is the only
// one allowed; failed, it is one more possibility.
func (m metaModel) apply(ops []wal.Op, acked bool) {
	last := map[string]wal.Op{}
	for _, op := range ops {
		last[string(op.Key)] = op
	}
	for k, op := range last {
		a := m.get(k)
		if acked {
			a.absent, a.vals = false, map[string]bool{}
		}
		if op.Type == wal.OpDelete {
			a.absent = true
		} else {
			a.vals[string(op.Value)] = true
		}
	}
}

func metaRound(t *testing.T, seed uint64, nops int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	inj := &faultInjector{rng: rand.New(rand.NewPCG(seed^1, seed^2))}
	inj.readP = []float64{0.01, 0.05, 0.2}[rng.IntN(3)]
	inj.writeP = []float64{0.01, 0.05, 0.2}[rng.IntN(3)]
	mem := vfs.NewMem()
	o := Options{
		Name: "meta", Dir: "/meta/db", FS: errorfs.Wrap(mem, inj),
		MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger(),
		ChunkBytes:  []int{1024, 4096, 0}[rng.IntN(3)],
		Compression: wal.Compression(rng.IntN(3)),
	}
	if rng.IntN(2) == 0 {
		o.History.Retention = -1
	}
	if rng.IntN(2) == 0 {
		o.segmentBytes, o.collectEvery, o.recycleAnyway = 64<<10, 2*time.Millisecond, true
	}
	if rng.IntN(3) == 0 {
		o.Retention = Retention{MaxEntries: 32, MaxBytes: -1, MaxAge: -1}
	}
	if rng.IntN(3) == 0 {
		o.ReadCacheBytes = -1
	}
	t.Logf("options: chunk %d, compression %d, history %v, segments %d, retention %+v, read cache %d; faults: read %v, write %v",
		o.ChunkBytes, o.Compression, o.History.Retention >= 0, o.segmentBytes, o.Retention, o.ReadCacheBytes, inj.readP, inj.writeP)

	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	model := metaModel{}
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	value := func(i int) []byte {
		n := 8 + rng.IntN(64)
		switch rng.IntN(6) {
		case 0:
			n = 500 + rng.IntN(3000)
		case 1:
			n = 5000 + rng.IntN(20000)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte('a' + (i+j*7)%26)
		}
		copy(b, fmt.Sprintf("op%d:", i))
		return b
	}
	var acked, failed, readErrs, reads int
	// reopen closes the store and opens it again; with the faults on, an
	// open may fail (an error, never a silent loss): tried a few times,
	// then with the faults off.
	reopen := func(faults bool) {
		s.Close()
		s = nil
		inj.set(faults)
		for try := 0; s == nil; try++ {
			if try == 3 {
				inj.set(false)
			}
			if s, err = Open(o); err != nil {
				if try > 3 {
					t.Fatalf("open without faults: %v", err)
				}
				s = nil
			}
		}
	}
	check := func(op int, k string, found bool, v []byte) {
		if a := model.get(k); !a.allows(found, v) {
			got := "absent"
			if found {
				got = fmt.Sprintf("%d bytes %.12q", len(v), v)
			}
			t.Fatalf("op %d: %s holds %s; allowed: %s", op, k, got, a)
		}
	}
	ctx := context.Background()
	faults := false
	for op := 0; op < nops; op++ {
		if op%40 == 0 {
			faults = rng.IntN(3) != 0
			inj.set(faults)
		}
		switch r := rng.IntN(100); {
		case r < 50:
			n := 1 + rng.IntN(4)
			ops := make([]wal.Op, n)
			for j := range ops {
				k := []byte(keys[rng.IntN(len(keys))])
				if rng.IntN(5) == 0 {
					ops[j] = wal.Op{Type: wal.OpDelete, Key: k}
				} else {
					ops[j] = wal.Op{Type: wal.OpSet, Key: k, Value: value(op*10 + j)}
				}
			}
			_, err := s.Write(ctx, Batch{Ops: ops})
			if err == nil {
				acked++
			} else {
				failed++
				if !faults {
					t.Fatalf("op %d: write without faults: %v", op, err)
				}
			}
			model.apply(ops, err == nil)
		case r < 62:
			// Compare-and-swap on the index just read: it holds unless a
			// failed write changed the key since (then the refusal
			// changes nothing); without faults it must hold.
			k := []byte(keys[rng.IntN(len(keys))])
			var idx uint64
			if _, err := s.Lookup([][]byte{k}, func(_ uint64, _ int, v []byte, index uint64, found bool) error {
				check(op, string(k), found, v)
				idx = index
				return nil
			}); err != nil {
				if !faults {
					t.Fatalf("op %d: read of %s without faults: %v", op, k, err)
				}
				continue
			}
			ops := []wal.Op{{Type: wal.OpSet, Key: k, Value: value(op * 10)}}
			_, err := s.Write(ctx, Batch{Ops: ops, Conds: []Cond{{Key: k, Index: idx}}})
			switch {
			case err == nil:
				acked++
				model.apply(ops, true)
			case errors.Is(err, ErrConditionFailed):
				if !faults {
					t.Fatalf("op %d: condition on %s at index %d refused without faults", op, k, idx)
				}
			default:
				failed++
				if !faults {
					t.Fatalf("op %d: write without faults: %v", op, err)
				}
				model.apply(ops, false)
			}
		case r < 68:
			// A batch with an ID, retried at once if it failed: the
			// retry applies it or reports the first attempt's outcome.
			ops := []wal.Op{{Type: wal.OpSet, Key: []byte(keys[rng.IntN(len(keys))]), Value: value(op * 10)}}
			b := Batch{Ops: ops, ID: []byte(fmt.Sprintf("batch-%d", op))}
			_, err := s.Write(ctx, b)
			if err != nil {
				_, err = s.Write(ctx, b)
			}
			if err == nil {
				acked++
			} else {
				failed++
				if !faults {
					t.Fatalf("op %d: write without faults: %v", op, err)
				}
			}
			model.apply(ops, err == nil)
		case r < 90:
			k := keys[rng.IntN(len(keys))]
			reads++
			_, err := s.Lookup([][]byte{[]byte(k)}, func(_ uint64, _ int, v []byte, _ uint64, found bool) error {
				check(op, k, found, v)
				return nil
			})
			if err != nil {
				readErrs++
				if !faults {
					t.Fatalf("op %d: read of %s without faults: %v", op, k, err)
				}
			}
		case r < 95:
			if err := s.Compact(); err != nil && !faults {
				t.Fatalf("op %d: compaction without faults: %v", op, err)
			}
		default:
			reopen(faults)
		}
	}

	// The faults stop: after a reopen every key holds an allowed value,
	// and the store is clean.
	reopen(false)
	for _, k := range keys {
		_, err := s.Lookup([][]byte{[]byte(k)}, func(_ uint64, _ int, v []byte, _ uint64, found bool) error {
			check(nops, k, found, v)
			return nil
		})
		if err != nil {
			t.Fatalf("read of %s after the faults: %v", k, err)
		}
	}
	mustVerify(t, s)
	// And it takes writes again.
	if _, err := s.Write(ctx, Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("after"), Value: []byte("x")}}}); err != nil {
		t.Fatalf("write after the faults: %v", err)
	}
	inj.mu.Lock()
	t.Logf("%d batches acknowledged, %d failed; %d reads, %d failed; %d read faults, %d write faults injected",
		acked, failed, reads, readErrs, inj.reads, inj.writes)
	inj.mu.Unlock()
}
