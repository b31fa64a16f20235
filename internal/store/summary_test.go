package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// summaryOnDisk returns the stored summary record of block, nil if none.
func summaryOnDisk(t *testing.T, s *Store, block uint64) []byte {
	t.Helper()
	v, c, err := s.db.Get(summaryKey(block))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return append([]byte(nil), v...)
}

// Every block is committed with a summary that agrees with it; a damaged
// summary does not decode.
func TestBlockSummary(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{Name: "summary"})
	r := mustWrite(t, s, setb("big-a", pattern(1, 3000)), set("small", "x"), setb("big-b", pattern(2, 2000)))
	mustWrite(t, s, setb("big-a", pattern(3, 1500))) // a new block
	raw := summaryOnDisk(t, s, r.Index)
	if raw == nil {
		t.Fatal("block 1 has no summary")
	}
	sum, err := decodeSummary(r.Index, raw)
	if err != nil {
		t.Fatal(err)
	}
	blk := blockGet(t, s, r.Index)
	entries, err := wal.DecodeBlock(blk)
	if err != nil {
		t.Fatal(err)
	}
	last, err := wal.BlockLastHash(blk)
	if err != nil {
		t.Fatal(err)
	}
	stored := int64(len(blk))
	if sum.count != uint64(len(entries)) || sum.lastTime != entries[len(entries)-1].Time || sum.lastHash != last || sum.storedBytes != stored {
		t.Fatalf("summary %+v disagrees with the block (%d entries, time %d, %d bytes)", sum, len(entries), entries[len(entries)-1].Time, stored)
	}
	got := map[string]int{}
	for _, v := range sum.values {
		if v.index != r.Index {
			t.Fatalf("value %q at index %d, want %d", v.key, v.index, r.Index)
		}
		got[string(v.key)] = v.valueLen
	}
	if len(got) != 2 || got["big-a"] != 3000 || got["big-b"] != 2000 {
		t.Fatalf("summary lists values %v, want big-a:3000 big-b:2000 (not the small one)", got)
	}
	mustVerify(t, s)

	for i := range raw {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 0x40
		if _, err := decodeSummary(r.Index, bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
	for n := range len(raw) {
		if _, err := decodeSummary(r.Index, raw[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorrupt", n, err)
		}
	}
}

// Retention drops, retires and copies out blocks the same way whether it
// reads their summaries or, for blocks without one (written before
// summaries existed) or with a damaged one, the blocks themselves.
func TestRetentionWithAndWithoutSummaries(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"summary", "missing", "damaged"} {
		t.Run(mode, func(t *testing.T) {
			s := openTest(t, Options{Name: "summary-" + mode, Retention: Retention{MaxEntries: 3}, History: noHistory})
			val := func(k string) []byte { return pattern(len(k)*31+int(k[0])+int(k[1]), 2000) }
			// Block 1: a0 a1; block 2: b0 b1; block 3 replaces a0, so
			// block 1 is half live (copied out when it leaves the log),
			// block 2 wholly (retired).
			mustWrite(t, s, setb("a0", val("a0")), setb("a1", val("a1")))
			mustWrite(t, s, setb("b0", val("b0")), setb("b1", val("b1")))
			mustWrite(t, s, set("a0", "small"))
			integrity := s.Metrics().IntegrityErrors["block_summary"]
			for _, b := range []uint64{1, 2} {
				switch mode {
				case "missing":
					if err := s.db.Delete(summaryKey(b), pebble.Sync); err != nil {
						t.Fatal(err)
					}
				case "damaged":
					raw := summaryOnDisk(t, s, b)
					raw[len(raw)-1] ^= 1
					if err := s.db.Set(summaryKey(b), raw, pebble.Sync); err != nil {
						t.Fatal(err)
					}
				}
			}
			materialized := s.Metrics().ValuesMaterialized
			bySummary := s.Metrics().LogBlocksDropped["summary"]
			byBlock := s.Metrics().LogBlocksDropped["block"]
			mustWrite(t, s, setb("c0", val("c0"))) // block 1 leaves the log
			mustWrite(t, s, setb("d0", val("d0"))) // block 2 leaves the log
			if blockExists(t, s, 1) || !blockExists(t, s, 2) {
				t.Fatalf("block 1 exists %v (want deleted), block 2 %v (want retired)", blockExists(t, s, 1), blockExists(t, s, 2))
			}
			if got := s.Metrics().ValuesMaterialized - materialized; got != 1 {
				t.Fatalf("%v values copied out, want 1 (a1)", got)
			}
			wantBySummary, wantByBlock := 2.0, 0.0
			if mode != "summary" {
				wantBySummary, wantByBlock = 0, 2
			}
			if got, got2 := s.Metrics().LogBlocksDropped["summary"]-bySummary,
				s.Metrics().LogBlocksDropped["block"]-byBlock; got != wantBySummary || got2 != wantByBlock {
				t.Fatalf("blocks dropped by summary %v, by reading the block %v; want %v, %v", got, got2, wantBySummary, wantByBlock)
			}
			recs, tot := retiredOnDisk(t, s)
			if r := recs[2]; len(recs) != 1 || r.live != 2 || r.liveBytes != 4000 || tot.blocks != 1 {
				t.Fatalf("retired records %+v, totals %+v; want block 2 with 2 live values", recs, tot)
			}
			for _, b := range []uint64{1, 2} {
				if summaryOnDisk(t, s, b) != nil {
					t.Fatalf("block %d left the log but its summary stayed", b)
				}
			}
			for _, k := range []string{"a1", "b0", "b1", "c0", "d0"} {
				if v, _, ok := get(t, s, k); !ok || v != string(val(k)) {
					t.Fatalf("%s reads %d bytes (found %v)", k, len(v), ok)
				}
			}
			wantIntegrity := 0.0
			if mode == "damaged" {
				// Block 2's is read twice: when block 1 leaves (to see
				// that block 2 stays), then when it leaves.
				wantIntegrity = 3
			}
			if got := s.Metrics().IntegrityErrors["block_summary"] - integrity; got != wantIntegrity {
				t.Fatalf("%v damaged summaries counted, want %v", got, wantIntegrity)
			}
			mustVerify(t, s)
		})
	}
}

// qs verify reports a summary that disagrees with its block, one that does
// not decode, and one whose block is gone.
func TestVerifySummaryProblems(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, s *Store)
	}{
		{"wrong count", func(t *testing.T, s *Store) {
			sum, err := decodeSummary(1, summaryOnDisk(t, s, 1))
			if err != nil {
				t.Fatal(err)
			}
			sum.count++
			putSummary(t, s, 1, sum)
		}},
		{"value not in the block", func(t *testing.T, s *Store) {
			sum, err := decodeSummary(1, summaryOnDisk(t, s, 1))
			if err != nil {
				t.Fatal(err)
			}
			sum.values = append(sum.values, summaryValue{index: 1, key: []byte("ghost"), valueLen: 5000})
			putSummary(t, s, 1, sum)
		}},
		{"undecodable", func(t *testing.T, s *Store) {
			if err := s.db.Set(summaryKey(1), []byte("junk"), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
		{"block gone", func(t *testing.T, s *Store) {
			if err := s.db.Set(summaryKey(999), summaryOnDisk(t, s, 1), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t, Options{Name: "verify-summary"})
			mustWrite(t, s, setb("a", pattern(1, 3000)), setb("b", pattern(2, 3000)))
			mustWrite(t, s, set("c", "x"))
			mustVerify(t, s)
			c.damage(t, s)
			r, err := s.Verify()
			if err != nil {
				t.Fatal(err)
			}
			if r.ProblemCount != 1 || r.Problems[0].Kind != ProblemSummary {
				t.Fatalf("problems %+v, want one %s", r.Problems, ProblemSummary)
			}
		})
	}
}

// putSummary stores sum as the summary of block, re-encoded.
func putSummary(t *testing.T, s *Store, block uint64, sum blockSummary) {
	t.Helper()
	c := &committer{g: groupPending{inLog: map[string]pendingValue{}, blockFirst: block}}
	c.last = appliedRecord{index: block + sum.count - 1, time: sum.lastTime, hash: sum.lastHash}
	for _, v := range sum.values {
		c.g.inLog[string(v.key)] = pendingValue{index: v.index, value: make([]byte, v.valueLen)}
	}
	if err := s.db.Set(summaryKey(block), c.encodeSummary(nil, int(sum.storedBytes), len(sum.values) > 0), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeSummary(block, summaryOnDisk(t, s, block)); err != nil {
		t.Fatal(fmt.Errorf("re-encoded summary: %w", err))
	}
}
