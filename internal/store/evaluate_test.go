package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// fakeState is a stateReader over maps: the evaluator tested alone.
type fakeState struct {
	at       appliedRecord
	values   map[string]string // existing keys
	index    map[string]uint64
	damaged  map[string]bool // record damaged: index and value unknown
	unread   map[string]bool // value unreadable (a chunk or log block)
	outcomes map[string]batchOutcome
	failRead bool
}

var errFakeRead = errors.New("read failed")

func (f *fakeState) last() appliedRecord { return f.at }

func (f *fakeState) key(k []byte) (keyView, error) {
	if f.failRead {
		return keyView{}, errFakeRead
	}
	if f.damaged[string(k)] {
		return keyView{exists: true, damaged: true}, nil
	}
	_, ok := f.values[string(k)]
	return keyView{exists: ok, index: f.index[string(k)]}, nil
}

func (f *fakeState) sameValue(k, v []byte) (bool, error) {
	if f.damaged[string(k)] || f.unread[string(k)] {
		return false, fmt.Errorf("%w: key %q", errValueDamaged, k)
	}
	return f.values[string(k)] == string(v), nil
}

func (f *fakeState) outcome(id []byte) (batchOutcome, bool, error) {
	o, ok := f.outcomes[string(id)]
	return o, ok, nil
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	const window = 100
	base := func() *fakeState {
		return &fakeState{
			at:       appliedRecord{index: 10, time: 1000},
			values:   map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"},
			index:    map[string]uint64{"a": 3, "b": 4, "c": 5, "d": 6},
			damaged:  map[string]bool{"c": true},
			unread:   map[string]bool{"d": true},
			outcomes: map[string]batchOutcome{"old": {index: 2, time: 800, changed: true}, "new": {index: 9, time: 950}},
		}
	}
	type want struct {
		ops     int    // ops of the entry; -1: no entry
		index   uint64 // result index
		time    int64
		dup     bool
		refused error
		err     error // returned
	}
	cases := []struct {
		name string
		cmd  command
		want want
	}{
		{"set", command{batch: Batch{Ops: []wal.Op{set("a", "x")}}, time: 2000}, want{ops: 1, index: 11, time: 2000}},
		{"set to the value it holds", command{batch: Batch{Ops: []wal.Op{set("a", "1")}}, time: 2000}, want{ops: -1, index: 10, time: 2000}},
		{"delete of a missing key", command{batch: Batch{Ops: []wal.Op{del("z")}}, time: 2000}, want{ops: -1, index: 10, time: 2000}},
		{"set then delete of a missing key", command{batch: Batch{Ops: []wal.Op{set("z", "1"), del("z")}}, time: 2000}, want{ops: 2, index: 11, time: 2000}},
		{"same set twice in a batch", command{batch: Batch{Ops: []wal.Op{set("z", "1"), set("z", "1")}}, time: 2000}, want{ops: 1, index: 11, time: 2000}},
		{"clock back", command{batch: Batch{Ops: []wal.Op{set("a", "x")}}, time: 5}, want{ops: 1, index: 11, time: 1000}},
		{"heartbeat", command{heartbeat: true, time: 2000}, want{ops: 0, index: 11, time: 2000}},
		{"condition holds", command{batch: Batch{Ops: []wal.Op{set("a", "x")}, Conds: []Cond{{Key: []byte("a"), Index: 3}, {Key: []byte("z")}}}, time: 2000}, want{ops: 1, index: 11, time: 2000}},
		{"condition fails", command{batch: Batch{Ops: []wal.Op{set("a", "x")}, Conds: []Cond{{Key: []byte("a"), Index: 4}}}, time: 2000}, want{ops: -1, refused: ErrConditionFailed}},
		{"condition on a damaged record", command{batch: Batch{Ops: []wal.Op{set("a", "x")}, Conds: []Cond{{Key: []byte("c"), Index: 5}}}, time: 2000}, want{ops: -1, err: ErrCorrupt}},
		{"set over a damaged record", command{batch: Batch{Ops: []wal.Op{set("c", "3")}}, time: 2000}, want{ops: -1, err: ErrCorrupt}},
		{"set over an unreadable value", command{batch: Batch{Ops: []wal.Op{set("d", "4")}}, time: 2000}, want{ops: -1, err: ErrCorrupt}},
		{"delete of a damaged record", command{batch: Batch{Ops: []wal.Op{del("c")}}, time: 2000}, want{ops: 1, index: 11, time: 2000}},
		{"duplicate", command{batch: Batch{Ops: []wal.Op{set("a", "x")}, ID: []byte("new")}, time: 1000}, want{ops: -1, index: 9, dup: true}},
		{"outcome expired by the command's time", command{batch: Batch{Ops: []wal.Op{set("a", "x")}, ID: []byte("old")}, time: 1000}, want{ops: 1, index: 11, time: 1000}},
		{"outcome at the edge of the window", command{batch: Batch{Ops: []wal.Op{set("a", "x")}, ID: []byte("new")}, time: 1050}, want{ops: -1, index: 9, dup: true}},
		{"format refuses an empty key", command{batch: Batch{Ops: []wal.Op{set("", "x")}}, time: 2000}, want{ops: -1, refused: ErrInvalid}},
		{"format refuses a long key", command{batch: Batch{Ops: []wal.Op{setb(string(make([]byte, wal.MaxKeyLen+1)), nil)}}, time: 2000}, want{ops: -1, refused: ErrTooLarge}},
		{"empty batch", command{time: 2000}, want{ops: -1, refused: ErrInvalid}},
	}
	ev := evaluator{idempotencyWindow: window}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ev.evaluate(base(), tc.cmd)
			if tc.want.err != nil || err != nil {
				if !errors.Is(err, tc.want.err) || !isDamage(err) {
					t.Fatalf("error %v, want %v", err, tc.want.err)
				}
				return
			}
			if tc.want.refused != nil || got.refused != nil {
				if !errors.Is(got.refused, tc.want.refused) || got.entry != nil {
					t.Fatalf("refused %v (entry %v), want %v", got.refused, got.entry, tc.want.refused)
				}
				return
			}
			if got.res.Index != tc.want.index || got.res.Duplicate != tc.want.dup {
				t.Fatalf("result %+v, want index %d duplicate %v", got.res, tc.want.index, tc.want.dup)
			}
			switch {
			case tc.want.ops < 0 && got.entry != nil:
				t.Fatalf("appends %+v, want nothing", got.entry)
			case tc.want.ops >= 0 && (got.entry == nil || len(got.entry.Ops) != tc.want.ops || got.entry.Index != tc.want.index):
				t.Fatalf("appends %+v, want %d ops at %d", got.entry, tc.want.ops, tc.want.index)
			}
			if !tc.want.dup && got.time != tc.want.time {
				t.Fatalf("time %d, want %d", got.time, tc.want.time)
			}
			if got.entry != nil && got.entry.Time != got.time {
				t.Fatalf("entry time %d, evaluation time %d", got.entry.Time, got.time)
			}
		})
	}
	t.Run("a failed read decides nothing", func(t *testing.T) {
		st := base()
		st.failRead = true
		_, err := ev.evaluate(st, command{batch: Batch{Ops: []wal.Op{set("a", "x")}}, time: 2000})
		if !errors.Is(err, errFakeRead) || isDamage(err) {
			t.Fatalf("error %v, want the read failure, not damage", err)
		}
	})
}
