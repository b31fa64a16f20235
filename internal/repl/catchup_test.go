package repl

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestCatchUpRate measures how fast a new replica applies a long log it
// is far behind on (the "apply" benchmark: target ≥ 100,000
// entries/s). Each entry is one set of a 100-byte value, as in a busy
// configuration database. Gated: QS_BENCH=1 (QS_BENCH_ENTRIES, default
// 200,000).
func TestCatchUpRate(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("benchmark: set QS_BENCH=1")
	}
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("QS_BENCH_ENTRIES")); err == nil && v > 0 {
		n = v
	}
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: -1, MaxBytes: -1, MaxAge: -1})
	// Build the root's log fast: sealed entries applied in large batches.
	val := make([]byte, 100)
	var v wal.Verifier
	batch := make([]wal.Entry, 0, 5000)
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		e := wal.Entry{Index: uint64(i), Time: time.Now().UnixNano(), Kind: wal.KindData,
			Ops: []wal.Op{{Type: wal.OpSet, Key: fmt.Appendf(nil, "key-%07d", i%50000), Value: val}}}
		e.Seal(v.Hash, nil)
		v.Index, v.Hash = e.Index, e.Hash
		batch = append(batch, e)
		if len(batch) == cap(batch) || i == n {
			if err := root.Apply(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	addr := startServer(t, root, NewProcessID(), nil)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	start := time.Now()
	// Replay, do not bootstrap: the log is what is measured here.
	startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.BootstrapMinEntries = -1 })
	waitFor(t, "catch-up", 10*time.Minute, func() bool { return rep.AppliedIndex() == uint64(n) })
	d := time.Since(start)
	t.Logf("replica applied %d entries in %v: %.0f entries/s", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
}
