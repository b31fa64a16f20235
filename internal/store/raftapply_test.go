package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// raftCommands is a script exercising every kind of evaluation: sets,
// deletes, no-ops, conditions that hold and fail, duplicate batch ids,
// heartbeats, empty commands, and a clock that goes back.
func raftCommands() []RaftCommand {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var cmds []RaftCommand
	add := func(c RaftCommand) {
		c.RaftIndex = uint64(len(cmds) + 3) // raft logs start after conf changes
		if c.Time == 0 {
			c.Time = t0 + int64(len(cmds))*int64(time.Millisecond)
		}
		cmds = append(cmds, c)
	}
	for i := 0; i < 20; i++ {
		add(RaftCommand{Batch: Batch{Ops: []wal.Op{set(fmt.Sprintf("k%d", i%7), fmt.Sprint(i))}, ID: []byte(fmt.Sprint("id", i))}})
	}
	add(RaftCommand{Batch: Batch{Ops: []wal.Op{set("k1", "15")}}})                                              // no-op
	add(RaftCommand{Batch: Batch{Ops: []wal.Op{set("k1", "x")}, Conds: []Cond{{Key: []byte("k1"), Index: 1}}}}) // fails
	add(RaftCommand{Batch: Batch{Ops: []wal.Op{set("k0", "dup")}, ID: []byte("id3")}})                          // duplicate
	add(RaftCommand{})                                                                                          // empty
	add(RaftCommand{Heartbeat: true})
	add(RaftCommand{Batch: Batch{Ops: []wal.Op{del("k2"), del("nope")}}, Time: t0 - int64(time.Hour)}) // clock back
	add(RaftCommand{Batch: Batch{Ops: []wal.Op{set("big", string(pattern(1, 3000)))}}})
	return cmds
}

// Two stores applying the same commands, in different groupings, hold the
// same log (index and hash) and data; commands at or below the applied
// Raft index are skipped, and no-op commands advance it.
func TestApplyRaftIsDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmds := raftCommands()
	a := openTest(t, Options{Now: func() time.Time { return time.Unix(1, 0) }})
	b := openTest(t, Options{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	resA, err := a.ApplyRaft(ctx, cmds)
	if err != nil {
		t.Fatal(err)
	}
	var resB []RaftResult
	for i := 0; i < len(cmds); i += 3 {
		r, err := b.ApplyRaft(ctx, cmds[i:min(i+3, len(cmds))])
		if err != nil {
			t.Fatal(err)
		}
		resB = append(resB, r...)
	}
	for i := range cmds {
		if resA[i].Res != resB[i].Res || (resA[i].Err == nil) != (resB[i].Err == nil) {
			t.Fatalf("command %d: results differ: %+v vs %+v", i, resA[i], resB[i])
		}
	}
	if !errors.Is(resA[21].Err, ErrConditionFailed) || !resA[22].Res.Duplicate || resA[20].Res.Changed {
		t.Fatalf("evaluation: cond %v, dup %+v, noop %+v", resA[21].Err, resA[22].Res, resA[20].Res)
	}
	ha, hb := appliedHash(t, a), appliedHash(t, b)
	if ha != hb {
		t.Fatalf("heads differ: %+v vs %+v", ha, hb)
	}
	if da, db := digestOf(t, a), digestOf(t, b); da != db {
		t.Fatal("digests differ")
	}
	last := cmds[len(cmds)-1].RaftIndex
	if a.RaftApplied() != last || b.RaftApplied() != last {
		t.Fatalf("raft applied %d, %d; want %d", a.RaftApplied(), b.RaftApplied(), last)
	}
	// The clock never goes back.
	ents, err := a.ReadLog(1, 1000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ents); i++ {
		if ents[i].Time < ents[i-1].Time {
			t.Fatalf("entry %d time goes back", ents[i].Index)
		}
	}
	// Applying again skips everything and changes nothing.
	again, err := a.ApplyRaft(ctx, cmds[len(cmds)-3:])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		if !errors.Is(r.Err, ErrRaftApplied) {
			t.Fatalf("re-applied command: %+v", r)
		}
	}
	if appliedHash(t, a) != ha {
		t.Fatal("skipped commands changed the log")
	}
	// An empty command alone still advances the Raft index, durably.
	if _, err := a.ApplyRaft(ctx, []RaftCommand{{RaftIndex: last + 5}}); err != nil {
		t.Fatal(err)
	}
	dir := a.Options().Dir
	a.Close()
	a2 := openTest(t, Options{Dir: dir})
	if a2.RaftApplied() != last+5 || appliedHash(t, a2) != ha {
		t.Fatalf("after reopen: raft applied %d, head %+v", a2.RaftApplied(), appliedHash(t, a2))
	}
	mustVerify(t, a2)
}

func digestOf(t *testing.T, s *Store) Digest {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestResetRaft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, Options{})
	if _, err := s.ApplyRaft(ctx, raftCommands()); err != nil {
		t.Fatal(err)
	}
	h := appliedHash(t, s)
	if err := s.ResetRaft(ctx); err != nil {
		t.Fatal(err)
	}
	if s.RaftApplied() != 0 || appliedHash(t, s) != h {
		t.Fatalf("after reset: raft %d, head changed %v", s.RaftApplied(), appliedHash(t, s) != h)
	}
	res, err := s.ApplyRaft(ctx, []RaftCommand{{RaftIndex: 1, Time: 1, Batch: Batch{Ops: []wal.Op{set("new", "1")}}}})
	if err != nil || res[0].Err != nil || res[0].Res.Index != h.index+1 {
		t.Fatalf("first command of the new cluster: %+v %v", res, err)
	}
	dir := s.Options().Dir
	s.Close()
	if s2 := openTest(t, Options{Dir: dir}); s2.RaftApplied() != 1 {
		t.Fatalf("raft applied %d after reopen", s2.RaftApplied())
	}
}

// A store that applies a Raft log takes no write from anywhere else: not
// from a client (Write), not a heartbeat of its own, and not entries
// replicated from another node (Apply), which would fork its log from the
// other members'.
func TestRaftStoreRefusesOtherWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, Options{})
	if _, err := s.ApplyRaft(ctx, raftCommands()); err != nil {
		t.Fatal(err)
	}
	h := appliedHash(t, s)
	if _, err := s.Write(ctx, Batch{Ops: []wal.Op{set("x", "1")}}); !errors.Is(err, ErrNotRoot) {
		t.Errorf("Write: %v, want ErrNotRoot", err)
	}
	if _, err := s.Heartbeat(ctx); !errors.Is(err, ErrNotRoot) {
		t.Errorf("Heartbeat: %v, want ErrNotRoot", err)
	}
	next := wal.Entry{Index: h.index + 1, Time: 1, Ops: []wal.Op{set("x", "1")}}
	next.Seal(h.hash, nil)
	if err := s.Apply(ctx, []wal.Entry{next}); !errors.Is(err, ErrNotRoot) {
		t.Errorf("Apply: %v, want ErrNotRoot", err)
	}
	if appliedHash(t, s) != h {
		t.Fatal("a refused write changed the log")
	}
}

// Members of an HA root evaluate the same commands and must reach the same
// log. One whose own copy of a key is damaged cannot tell how a command
// that depends on that key's value or index would go on the others: it
// must stop applying (an error, which the member retries), not decide on
// its own. Before, a set back to the key's value was kept there as a
// repair and dropped as a no-op elsewhere, a condition on the key failed
// there only, and so did the retry of a batch ID whose outcome was
// damaged: the members' logs forked.
func TestRaftMemberStopsOnLocalDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := []RaftCommand{
		{RaftIndex: 1, Time: 1, Batch: Batch{Ops: []wal.Op{set("k", "v")}}},
		{RaftIndex: 2, Time: 2, Batch: Batch{Ops: []wal.Op{set("other", "1"), setb("big", pattern(1, 3000))}, ID: []byte("id")}},
	}
	record := dataKey(nil, []byte("k"))
	flipRecord := func(t *testing.T, s *Store) { rawSet(t, s, record, flip(rawGet(t, s, record), 6)) }
	cases := []struct {
		name   string
		damage func(t *testing.T, s *Store)
		cmd    Batch
	}{
		{"set to the value it holds", flipRecord, Batch{Ops: []wal.Op{set("k", "v")}}},
		{"set to the value a damaged chunk holds", func(t *testing.T, s *Store) {
			k := chunkKey(nil, []byte("big"), 1)
			rawSet(t, s, k, flip(rawGet(t, s, k), 100))
		}, Batch{Ops: []wal.Op{setb("big", pattern(1, 3000))}}},
		{"condition on its index", flipRecord, Batch{Ops: []wal.Op{set("x", "1")}, Conds: []Cond{{Key: []byte("k"), Index: 1}}}},
		{"retry of a batch id", func(t *testing.T, s *Store) { rawSet(t, s, batchIDKey([]byte("id")), []byte("not an outcome")) },
			Batch{Ops: []wal.Op{set("other", "2")}, ID: []byte("id")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			healthy := openTest(t, Options{ChunkBytes: 1024, Logger: quietLogger()})
			damaged := openTest(t, Options{ChunkBytes: 1024, Logger: quietLogger()})
			for _, s := range []*Store{healthy, damaged} {
				if _, err := s.ApplyRaft(ctx, setup); err != nil {
					t.Fatal(err)
				}
			}
			tc.damage(t, damaged)
			cmd := []RaftCommand{{RaftIndex: 3, Time: 3, Batch: tc.cmd}}
			if _, err := healthy.ApplyRaft(ctx, cmd); err != nil {
				t.Fatal(err)
			}
			before := appliedHash(t, damaged)
			if _, err := damaged.ApplyRaft(ctx, cmd); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("the damaged member applied the command: %v", err)
			}
			if appliedHash(t, damaged) != before || damaged.RaftApplied() != 2 {
				t.Fatalf("the damaged member moved on: log %d, raft %d", damaged.AppliedIndex(), damaged.RaftApplied())
			}
		})
	}
}

// A proposal or heartbeat dated a day ahead (a member's clock gone wrong)
// moves the log's clock by at most maxProposedClockStep: a retried write
// seconds later is still recognised as applied, and does not overwrite the
// newer value written in between.
func TestFutureDatedProposalCannotBreakIdempotency(t *testing.T) {
	t.Parallel()
	const db = "future-dated"
	ctx := t.Context()
	s := openTest(t, Options{Name: db, IdempotencyWindow: 10 * time.Minute})
	t0 := time.Now().UnixNano()
	day := int64(24 * time.Hour)
	write := Batch{Ops: []wal.Op{set("k", "old")}, ID: []byte("retried")}
	clamped := s.Metrics().EntryTimeClamped
	cmds := []RaftCommand{
		{RaftIndex: 1, Time: t0, Batch: write},
		{RaftIndex: 2, Time: t0 + day, Heartbeat: true},
		{RaftIndex: 3, Time: t0 + day, Batch: Batch{Ops: []wal.Op{set("other", "x")}}},
		{RaftIndex: 4, Time: t0 + int64(time.Second), Batch: Batch{Ops: []wal.Op{set("k", "new")}}},
		{RaftIndex: 5, Time: t0 + 2*int64(time.Second), Batch: write},
	}
	res, err := s.ApplyRaft(ctx, cmds)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("command %d: %v", i+1, r.Err)
		}
	}
	if !res[4].Res.Duplicate || res[4].Res.Index != res[0].Res.Index {
		t.Fatalf("retried write: %+v, want a duplicate of index %d", res[4].Res, res[0].Res.Index)
	}
	if v, _, _ := get(t, s, "k"); v != "new" {
		t.Fatalf("k = %q after the retry, want the newer value", v)
	}
	if lag := s.AppliedTime().UnixNano() - t0; lag > 2*maxProposedClockStep {
		t.Fatalf("log clock moved %v by two future-dated entries", time.Duration(lag))
	}
	if got := s.Metrics().EntryTimeClamped; got < clamped+2 {
		t.Errorf("clamped entries counted %v -> %v", clamped, got)
	}
}

func TestBoundTime(t *testing.T) {
	t.Parallel()
	step := maxProposedClockStep
	for _, tc := range []struct {
		name    string
		cmd     command
		last    int64
		want    int64
		clamped bool
	}{
		{"first entry takes the proposed time", command{time: 5 * step, proposed: true}, 0, 5 * step, false},
		{"never back", command{time: 10, proposed: true}, 100, 100, false},
		{"within the step", command{time: 100 + step, proposed: true}, 100, 100 + step, false},
		{"ahead: bounded", command{time: 100 + 10*step, proposed: true}, 100, 100 + step, true},
		{"a root's own clock is not bounded", command{time: 100 + 10*step}, 100, 100 + 10*step, false},
	} {
		if got, c := boundTime(tc.cmd, tc.last); got != tc.want || c != tc.clamped {
			t.Errorf("%s: %d %v, want %d %v", tc.name, got, c, tc.want, tc.clamped)
		}
	}
}
