package tests

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"
)

// TestKill9UnderMemcacheSets kills the server with SIGKILL at random
// moments while memcached clients set keys through the memcached door,
// restarts it, and checks that every set answered STORED is there with
// its value, and that qs verify passes.
func TestKill9UnderMemcacheSets(t *testing.T) {
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	dir := t.TempDir()
	acked := map[string]string{}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	for round := range rounds {
		p := startQS(t, dir)
		mc := gomemcache.New(p.Addr["memcache"])
		mc.Timeout = 30 * time.Second
		mc.MaxIdleConns = 16
		checkAcked(t, mc, acked)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100000; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					value := fmt.Sprintf("%s-%d", key, rand.Uint64())
					if err := mc.Set(&gomemcache.Item{Key: key, Value: []byte(value)}); err != nil {
						return // the server died
					}
					mu.Lock()
					acked[key] = value
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		p.kill()
		close(stop)
		wg.Wait()
	}
	p := startQS(t, dir)
	mc := gomemcache.New(p.Addr["memcache"])
	mc.Timeout = 30 * time.Second
	checkAcked(t, mc, acked)
	if len(acked) < rounds {
		t.Fatalf("only %d sets acknowledged in %d rounds", len(acked), rounds)
	}
	p.stop()
	if out, code := runQS(t, "verify", "--data", dir); code != 0 {
		t.Fatalf("qs verify exit %d:\n%s", code, out)
	}
	t.Logf("%d rounds, %d sets acknowledged", rounds, len(acked))
}

// checkAcked checks that every acknowledged key holds its value.
func checkAcked(t *testing.T, mc *gomemcache.Client, acked map[string]string) {
	t.Helper()
	for key, want := range acked {
		it, err := mc.Get(key)
		if err != nil {
			t.Fatalf("get %s, acknowledged as %q: %v", key, want, err)
		}
		if string(it.Value) != want {
			t.Fatalf("%s = %q, acknowledged as %q", key, it.Value, want)
		}
	}
}
