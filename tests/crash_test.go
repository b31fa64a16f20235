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

// TestKill9UnderWrites kills the server with SIGKILL at random moments while
// concurrent writers send multi-key batches, restarts it, and checks that
// every acknowledged batch is present whole with the index it was
// acknowledged with, that no unacknowledged batch is half-applied, that qs
// verify passes and that indexes continue after the last one used.
func TestKill9UnderWrites(t *testing.T) {
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	dir := t.TempDir()
	var acked []ack
	var attempted []string
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	const keysPerBatch = 4
	for round := 0; round < rounds; round++ {
		p := startQS(t, dir)
		c := p.client(t)
		// Everything acknowledged before any crash must be there, whole.
		checkBatches(t, c, acked, attempted, keysPerBatch)

		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil && i < 100000; i++ {
					name := fmt.Sprintf("r%d-w%d-b%d", round, w, i)
					ops := make([]client.Op, keysPerBatch)
					for k := range ops {
						ops[k] = client.Op{Key: fmt.Sprintf("%s-k%d", name, k), Value: []byte(name)}
					}
					mu.Lock()
					attempted = append(attempted, name)
					mu.Unlock()
					res, err := c.Batch(ctx, ops, nil)
					if err != nil {
						return // the server died (or we stopped)
					}
					mu.Lock()
					acked = append(acked, ack{batch: name, index: res.Index})
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		p.kill()
		cancel()
		wg.Wait()
	}
	p := startQS(t, dir)
	c := p.client(t)
	checkBatches(t, c, acked, attempted, keysPerBatch)
	if len(acked) < rounds {
		t.Fatalf("only %d batches acknowledged in %d rounds", len(acked), rounds)
	}
	// Indexes are never reused: acknowledged indexes are distinct, and the
	// next write lands after all of them.
	seen := map[uint64]string{}
	var maxIdx uint64
	for _, a := range acked {
		if prev, ok := seen[a.index]; ok {
			t.Fatalf("index %d acknowledged for %s and %s", a.index, prev, a.batch)
		}
		seen[a.index] = a.batch
		maxIdx = max(maxIdx, a.index)
	}
	res, err := c.Put(context.Background(), "after", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Index <= maxIdx {
		t.Fatalf("write after crashes got index %d, not above the last acknowledged %d", res.Index, maxIdx)
	}
	p.stop()
	if out, code := runQS(t, "verify", "--data", dir); code != 0 {
		t.Fatalf("qs verify exit %d:\n%s", code, out)
	}
	t.Logf("%d rounds, %d batches acknowledged, %d attempted", rounds, len(acked), len(attempted))
}

type ack struct {
	batch string
	index uint64
}

// checkBatches checks every acknowledged batch is whole with its index and
// every attempted batch is whole or absent.
func checkBatches(t *testing.T, c *client.Client, acked []ack, attempted []string, keysPerBatch int) {
	t.Helper()
	ctx := context.Background()
	isAcked := map[string]uint64{}
	for _, a := range acked {
		isAcked[a.batch] = a.index
	}
	for _, name := range attempted {
		keys := make([]string, keysPerBatch)
		for k := range keys {
			keys[k] = fmt.Sprintf("%s-k%d", name, k)
		}
		res, err := c.MGet(ctx, keys, client.ReadOptions{})
		if err != nil {
			t.Fatalf("mget %s: %v", name, err)
		}
		idx, wasAcked := isAcked[name]
		switch {
		case len(res.Values) == keysPerBatch:
			for k, v := range res.Values {
				if string(v) != name {
					t.Fatalf("%s = %q, want %q", k, v, name)
				}
			}
			if wasAcked {
				v, err := c.Get(ctx, keys[0], client.ReadOptions{})
				if err != nil || v.Index != idx {
					t.Fatalf("batch %s acknowledged at %d, key has index %d (err %v)", name, idx, v.Index, err)
				}
			}
		case len(res.Values) == 0:
			if wasAcked {
				t.Fatalf("acknowledged batch %s (index %d) is missing after kill -9", name, idx)
			}
		default:
			t.Fatalf("batch %s is half-applied: %d of %d keys", name, len(res.Values), keysPerBatch)
		}
	}
}
