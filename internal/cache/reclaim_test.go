package cache

import "testing"

func TestReclaim(t *testing.T) {
	var r Reclaim
	if lo, hi, compact := r.Freed(0); compact || lo != nil || hi != nil {
		t.Fatal("an empty reclaim asked for a compaction")
	}
	for _, k := range []string{"m", "c", "x", "d"} {
		r.Key([]byte(k))
	}
	if _, _, compact := r.Freed(CompactAfter - 1); compact {
		t.Fatal("compaction asked for below CompactAfter")
	}
	r.Key([]byte("a"))
	lo, hi, compact := r.Freed(1)
	if !compact || string(lo) != "a" || string(hi) != "x" {
		t.Fatalf("at CompactAfter: compact %v, range %q..%q; want a..x", compact, lo, hi)
	}
	// It starts over: a new range, the bytes counted from zero.
	r.Key([]byte("q"))
	if _, _, compact := r.Freed(CompactAfter - 1); compact {
		t.Fatal("the bytes were not counted from zero after a compaction")
	}
	lo, hi, compact = r.Freed(CompactAfter)
	if !compact || string(lo) != "q" || string(hi) != "q" {
		t.Fatalf("second range %q..%q (compact %v), want q..q", lo, hi, compact)
	}
	// A round whose evictions all went stale frees nothing.
	r.Key([]byte("z"))
	if _, _, compact := r.Freed(0); compact {
		t.Fatal("a round that freed nothing asked for a compaction")
	}
}
