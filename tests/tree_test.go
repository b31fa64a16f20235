package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestTreeKillIntermediateMidStream runs a three-level tree as real
// processes: a root, two intermediates, four leaves (each leaf's primary is
// one intermediate, its secondaries the other one and the root). One
// client keeps writing a mix of sets, overwrites, deletes and batches at
// the root while an intermediate is killed with SIGKILL mid-stream and
// later restarted on its data. Afterwards every node serves the root's
// data exactly (same digest of every key, value and write index), no
// node saw a gap or a broken hash chain, none bootstrapped, and every
// node's stored log verifies offline (`qs verify`): nothing was applied
// twice or skipped.
func TestTreeKillIntermediateMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("seven processes")
	}
	root := startQS(t, t.TempDir())
	mids := make([]*proc, 2)
	for i := range mids {
		mids[i] = startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	}
	leaves := make([]*proc, 4)
	for i := range leaves {
		primary, other := mids[i/2], mids[1-i/2]
		leaves[i] = startQS(t, t.TempDir(), "--upstream", primary.Addr["repl"],
			"--secondary", other.Addr["repl"]+","+root.Addr["repl"])
	}
	rc := root.client(t)

	// The writer: a small hot keyspace so that overwrites, deletes and
	// re-creates are frequent; one op in ten is a three-op batch.
	ctx, stopWriting := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 11))
		// Each write runs to its answer (stopping cancels no request): a
		// write cancelled in flight could still land after the last one.
		bg := context.Background()
		for n := 0; n < 20000 && ctx.Err() == nil; n++ {
			key := fmt.Sprintf("k%03d", rng.IntN(300))
			var err error
			switch r := rng.IntN(10); {
			case r < 6:
				_, err = rc.Put(bg, key, []byte(fmt.Sprintf("v%d-%d", n, rng.Int())), nil)
			case r < 9:
				_, err = rc.Delete(bg, key, nil)
			default:
				_, err = rc.Batch(bg, []client.Op{
					{Key: key, Value: []byte(fmt.Sprint(n))},
					{Delete: true, Key: fmt.Sprintf("k%03d", rng.IntN(300))},
					{Key: fmt.Sprintf("b%03d", rng.IntN(50)), Value: make([]byte, rng.IntN(3000))},
				}, nil)
			}
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					writeErr = err
					mu.Unlock()
				}
				return
			}
			mu.Lock()
			acked++
			mu.Unlock()
		}
	}()

	// Each step waits for a number of acknowledged writes (counted, not
	// timed, so that a loaded machine only slows the test).
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		if writeErr != nil {
			return 1 << 30 // reported below
		}
		return acked
	}
	waitCount(t, "acknowledged writes before the kill", 40, written)
	mids[0].kill() // mid-stream: its two leaves move to their secondaries
	killedDir := mids[0].Dir
	waitCount(t, "acknowledged writes while the intermediate is down", written()+40, written)
	mids[0] = startQS(t, killedDir, "--upstream", root.Addr["repl"])
	waitCount(t, "acknowledged writes after its restart", written()+40, written)
	stopWriting()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("write at the root failed: %v", writeErr)
	}
	last, err := rc.Put(context.Background(), "the-end", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged writes, last index %d", acked, last.Index)
	if acked < 100 {
		t.Fatalf("only %d writes during the test: the kill did not happen mid-stream", acked)
	}

	ro := client.ReadOptions{MinIndex: last.Index, Wait: 30 * time.Second}
	want, err := rc.Digest(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	nodes := append(append([]*proc{}, mids...), leaves...)
	for i, p := range nodes {
		got, err := p.client(t).Digest(context.Background(), ro)
		if err != nil {
			t.Fatalf("node %d digest: %v\n%s", i, err, p.out.String())
		}
		if got.SHA256 != want.SHA256 || got.Keys != want.Keys {
			t.Fatalf("node %d serves other data: %+v, root %+v", i, got, want)
		}
		for _, sample := range []string{
			`qs_repl_errors_total{db="default",kind="gap"}`,
			`qs_repl_errors_total{db="default",kind="hash"}`,
			`qs_repl_errors_total{db="default",kind="apply"}`,
			`qs_repl_bootstraps_total{db="default",result="installed"}`,
		} {
			if v, err := scrapeMetric(p.Addr["http"], sample); err != nil || v != 0 {
				t.Fatalf("node %d: %s = %v (%v)", i, sample, v, err)
			}
		}
	}
	// The leaves of the killed intermediate lost their stream (counted with
	// the same labels as the zero counts above, so those were not vacuous)
	// and streamed from a secondary.
	for _, p := range leaves[:2] {
		for _, sample := range []string{`qs_repl_errors_total{db="default",kind="io"}`, `qs_repl_reconnects_total{db="default"}`} {
			if v, err := scrapeMetric(p.Addr["http"], sample); err != nil || v < 1 {
				t.Fatalf("leaf of the killed intermediate: %s = %v (%v)", sample, v, err)
			}
		}
	}

	// The operator's tool agrees.
	addrs := root.Addr["http"]
	for _, p := range nodes {
		addrs += "," + p.Addr["http"]
	}
	if out, code := runQS(t, "digest", "--addr", addrs, "--min-index", fmt.Sprint(last.Index)); code != 0 {
		t.Fatalf("qs digest: exit %d\n%s", code, out)
	}

	for _, p := range append(nodes, root) {
		p.stop()
		if out, code := runQS(t, "verify", "--data", p.Dir); code != 0 {
			t.Fatalf("verify %s: exit %d\n%s", p.Dir, code, out)
		}
	}
}
