package repl

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestBootstrapRate is the bootstrap benchmark: MB/s of a
// bootstrap of a database of QS_BENCH_BOOTSTRAP_MB (default 1024) MB over
// loopback, against copying the same snapshot's files with cp (and with
// cp followed by sync, since a bootstrap fsyncs every file), alternating
// in the same run, and of a sealed bootstrap (a replica with the root's
// public key: the root hashes the files, the replica reads them back to
// check the seal). Target: bootstrap ≥ 0.5× cp. Gated: QS_BENCH=1.
func TestBootstrapRate(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("benchmark: set QS_BENCH=1")
	}
	mb := 1024
	if v, err := strconv.Atoi(os.Getenv("QS_BENCH_BOOTSTRAP_MB")); err == nil && v > 0 {
		mb = v
	}
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 1000})
	// 10 KB random values (incompressible), 50 per batch.
	const valueSize, perBatch = 10 << 10, 50
	ctx := context.Background()
	t0 := time.Now()
	for i := 0; i < mb<<20/valueSize; i += perBatch {
		ops := make([]wal.Op, 0, perBatch)
		for j := i; j < i+perBatch; j++ {
			v := make([]byte, valueSize)
			for k := 0; k < len(v); k += 8 {
				x := rand.Uint64()
				for b := 0; b < 8 && k+b < len(v); b++ {
					v[k+b] = byte(x >> (8 * b))
				}
			}
			ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(fmt.Sprintf("key-%08d", j)), Value: v})
		}
		if _, err := root.Write(ctx, store.Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d MB in %v; store on disk %d MB", mb, time.Since(t0).Round(time.Millisecond), root.DiskBytes()>>20)

	signer, verifier := testKeys(t)
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	probe := filepath.Join(t.TempDir(), "probe")
	if _, err := root.Checkpoint(probe); err != nil {
		t.Fatal(err)
	}
	size := dirSize(t, probe)
	os.RemoveAll(probe)
	rate := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }

	copyOnce := func(withSync bool) time.Duration {
		src := filepath.Join(t.TempDir(), "src")
		if _, err := root.Checkpoint(src); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "dst")
		start := time.Now()
		if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		if withSync {
			if out, err := exec.Command("sync", "-f", dst).CombinedOutput(); err != nil {
				t.Fatalf("sync: %v %s", err, out)
			}
		}
		d := time.Since(start)
		os.RemoveAll(src)
		os.RemoveAll(dst)
		return d
	}
	bootstrapOnce := func(sealed bool) time.Duration {
		rep := openStore(t, "", name, root.DBID(), store.Retention{})
		r, stop := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
			c.BootstrapLock = lockPath(t)
			c.IdleTimeout = time.Minute
			c.BootstrapMinEntries = 1 // a new replica: bootstrap, do not replay
			if sealed {
				c.Verifier = verifier
			}
		})
		waitFor(t, "bootstrap", 10*time.Minute, func() bool { return !r.State().Bootstrap.Finished.IsZero() })
		stop()
		b := r.State().Bootstrap
		if b.BytesDone != uint64(size) && b.BytesTotal != b.BytesDone {
			t.Fatalf("bootstrap moved %d of %d bytes", b.BytesDone, b.BytesTotal)
		}
		d := b.Finished.Sub(b.Started)
		rep.Close()
		os.RemoveAll(rep.Options().Dir)
		return d
	}
	var cp, cps, bs, bss []float64
	for round := range 3 {
		c, s, b, bsl := copyOnce(false), copyOnce(true), bootstrapOnce(false), bootstrapOnce(true)
		cp, cps, bs, bss = append(cp, rate(c)), append(cps, rate(s)), append(bs, rate(b)), append(bss, rate(bsl))
		t.Logf("round %d: cp %.0f MB/s, cp+sync %.0f MB/s, bootstrap %.0f MB/s, sealed %.0f MB/s (incl. snapshot, fsyncs, install)",
			round, rate(c), rate(s), rate(b), rate(bsl))
	}
	med := func(x []float64) float64 {
		y := append([]float64(nil), x...)
		for i := range y {
			for j := i + 1; j < len(y); j++ {
				if y[j] < y[i] {
					y[i], y[j] = y[j], y[i]
				}
			}
		}
		return y[len(y)/2]
	}
	t.Logf("snapshot %d MB; medians of 3: cp %.0f MB/s, cp+sync %.0f MB/s, bootstrap %.0f MB/s: ratio %.2f× cp, %.2f× cp+sync (target ≥ 0.5× cp); sealed bootstrap %.0f MB/s (%.2f× unsealed)",
		size>>20, med(cp), med(cps), med(bs), med(bs)/med(cp), med(bs)/med(cps), med(bss), med(bss)/med(bs))
}
