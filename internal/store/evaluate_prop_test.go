package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// randomCommands is a random stream of Raft commands over a few keys:
// sets (small values that often repeat, so many are no-ops; values long
// enough to be stored in the log or in chunks), deletes, conditions on
// indexes that sometimes hold, batch IDs that are reused, heartbeats,
// empty commands, a clock that sometimes goes back, and batches the
// format refuses (an empty key).
func randomCommands(rng *rand.Rand, n int) []RaftCommand {
	// Dated now: the log's retention by age (a day by default) runs on
	// the local clock, and would trim a log dated long ago while the
	// test runs.
	t0 := time.Now().UnixNano()
	keys := []string{"a", "b", "c", "d", "e"}
	value := func() []byte {
		switch rng.IntN(6) {
		case 0:
			return pattern(rng.IntN(2), 1500) // in the log by default, chunked at 1 KiB
		case 1:
			return pattern(2+rng.IntN(2), 5000) // chunked at 1 and 4 KiB
		default:
			return fmt.Appendf(nil, "v%d", rng.IntN(3))
		}
	}
	cmds := make([]RaftCommand, 0, n)
	for i := 0; i < n; i++ {
		c := RaftCommand{RaftIndex: uint64(i + 3), Time: t0 + int64(i)*int64(time.Millisecond)}
		if rng.IntN(10) == 0 {
			c.Time -= int64(time.Hour)
		}
		switch r := rng.IntN(20); {
		case r == 0:
			c.Heartbeat = true
		case r == 1: // only advances the Raft index
		default:
			for j := 0; j <= rng.IntN(3); j++ {
				k := keys[rng.IntN(len(keys))]
				if rng.IntN(4) == 0 {
					c.Batch.Ops = append(c.Batch.Ops, wal.Op{Type: wal.OpDelete, Key: []byte(k)})
				} else {
					c.Batch.Ops = append(c.Batch.Ops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: value()})
				}
			}
			if rng.IntN(4) == 0 {
				c.Batch.Conds = []Cond{{Key: []byte(keys[rng.IntN(len(keys))]), Index: uint64(rng.IntN(i + 1))}}
			}
			if rng.IntN(3) == 0 {
				c.Batch.ID = fmt.Appendf(nil, "id%d", rng.IntN(4))
			}
			if rng.IntN(40) == 0 {
				c.Batch.Ops[0].Key = nil // the format refuses it
			}
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// damageSome damages one stored thing of s behind its back: a bit of a
// key's value record or of one of its chunks, or the length of a batch
// outcome (whose record has no checksum of its own: a flipped bit in it
// cannot be told from a real outcome). It reports whether it found one.
func damageSome(t *testing.T, rng *rand.Rand, s *Store) bool {
	t.Helper()
	var k []byte
	switch rng.IntN(3) {
	case 0:
		k = dataKey(nil, []byte{byte('a' + rng.IntN(5))})
	case 1:
		k = chunkKey(nil, []byte{byte('a' + rng.IntN(5))}, uint32(rng.IntN(2)))
	default:
		k = batchIDKey(fmt.Appendf(nil, "id%d", rng.IntN(4)))
	}
	v, c, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if k[0] == prefixBatchID {
		v = v[:len(v)-1]
	} else {
		v = flip(append([]byte(nil), v...), rng.IntN(len(v)))
	}
	c.Close()
	rawSet(t, s, k, v)
	return true
}

// Members of an HA root whose configurations differ (limits, chunk size,
// compression, where log blocks are kept, clock) and whose local data is
// damaged apply the same random Raft commands alike: each either writes
// the very entries (index, time, ops, hash) and results of a healthy
// member with the default configuration, or refuses to go on (ErrCorrupt,
// nothing applied) at a command whose outcome depends on its damage.
// Evaluation sees only the command, the log format's bounds and the
// state, so no configuration or damage can make a member's log fork.
func TestEvaluationIsTheSameOnEveryMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	configs := []struct {
		name    string
		opts    Options
		damaged bool
	}{
		{"default", Options{}, false},
		{"low limits, 1 KiB chunks, zstd, clock ahead", Options{MaxKeyBytes: 1, MaxValueBytes: 100, MaxBatchOps: 1, MaxBatchBytes: 100,
			ChunkBytes: 1024, Compression: wal.CompressZstd, Now: clock(time.Hour)}, false},
		{"4 KiB chunks, snappy, blocks in Pebble, clock behind", Options{ChunkBytes: 4096, Compression: wal.CompressSnappy,
			blocksInPebble: true, Now: clock(-time.Hour)}, false},
		{"damaged", Options{}, true},
		{"damaged, 1 KiB chunks", Options{ChunkBytes: 1024}, true},
		{"damaged, low limits, history off", Options{MaxValueBytes: 10, ChunkBytes: 1024, History: HistoryOptions{Retention: -1}}, true},
	}
	// refusals: members that stopped; appliedDamaged: commands members
	// applied with damage in their data.
	refusals, appliedDamaged := 0, 0
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			cmds := randomCommands(rng, 120)
			stores := make([]*Store, len(configs))
			for i, c := range configs {
				o := c.opts
				o.Logger = quietLogger()
				stores[i] = openTest(t, o)
			}
			stopped := make([]bool, len(stores))
			damaged := make([]bool, len(stores))
			for from := 0; from < len(cmds); {
				to := min(len(cmds), from+1+rng.IntN(4))
				group := cmds[from:to]
				want, err := stores[0].ApplyRaft(ctx, group)
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i < len(stores); i++ {
					if stopped[i] {
						continue
					}
					s := stores[i]
					before, raftBefore := appliedHash(t, s), s.RaftApplied()
					got, err := s.ApplyRaft(ctx, group)
					if err != nil {
						if !configs[i].damaged || !errors.Is(err, ErrCorrupt) {
							t.Fatalf("%s: commands %d..%d: %v", configs[i].name, from, to-1, err)
						}
						if appliedHash(t, s) != before || s.RaftApplied() != raftBefore {
							t.Fatalf("%s refused the commands but applied some", configs[i].name)
						}
						stopped[i] = true
						refusals++
						continue
					}
					if damaged[i] {
						appliedDamaged += len(group)
					}
					for j := range want {
						if got[j].Res != want[j].Res || (got[j].Err == nil) != (want[j].Err == nil) {
							t.Fatalf("%s: command %d: %+v %v, the default member %+v %v", configs[i].name, from+j, got[j].Res, got[j].Err, want[j].Res, want[j].Err)
						}
					}
				}
				for i := range stores {
					if configs[i].damaged && !stopped[i] && rng.IntN(6) == 0 {
						damaged[i] = damageSome(t, rng, stores[i]) || damaged[i]
					}
				}
				from = to
			}
			ref := readAll(t, stores[0])
			for i := 1; i < len(stores); i++ {
				got := readAll(t, stores[i])
				if !stopped[i] {
					if len(got) != len(ref) {
						t.Fatalf("%s holds %d entries, the default member %d", configs[i].name, len(got), len(ref))
					}
				}
				for j := range got {
					if !sameEntry(&got[j], &ref[j]) {
						t.Fatalf("%s: entry %d differs from the default member's", configs[i].name, got[j].Index)
					}
				}
			}
		})
	}
	if refusals == 0 || appliedDamaged == 0 {
		t.Fatalf("the damage never mattered: %d members stopped, %d commands applied by damaged members", refusals, appliedDamaged)
	}
}

func readAll(t *testing.T, s *Store) []wal.Entry {
	t.Helper()
	es, err := s.ReadLog(1, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func sameEntry(a, b *wal.Entry) bool {
	return a.Index == b.Index && a.Time == b.Time && a.Kind == b.Kind && a.Hash == b.Hash &&
		slices.EqualFunc(a.Ops, b.Ops, func(x, y wal.Op) bool {
			return x.Type == y.Type && string(x.Key) == string(y.Key) && string(x.Value) == string(y.Value)
		})
}
