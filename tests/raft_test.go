package tests

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// A write the checker expects to find: key set to value at index.
type raftAck struct {
	key, value string
	index      uint64
	sent, at   time.Time
}

// TestRaftKillLeaderUnderWrites kills the leader of a 3-member root with
// SIGKILL, again and again, while writers write through any member. Every
// acknowledged write must be in the final log exactly once, at its
// acknowledged index; acknowledged compare-and-swap outcomes must hold; all
// members end with the same log and data. It reports the time from each
// kill to the first acknowledged write sent after it. QS_BENCH=1 runs 12
// kills instead of 3.
func TestRaftKillLeaderUnderWrites(t *testing.T) {
	kills := 3
	if os.Getenv("QS_BENCH") != "" {
		kills = 12
	}
	var extra []string
	if os.Getenv("QS_TEST_LOG") != "" {
		extra = []string{"--log-level", "info"}
	}
	c := newRaftCluster(t, 3, extra...)
	c.startAll()
	c.leader(15 * time.Second)

	var mu sync.Mutex
	var acks []raftAck
	var casAcks []raftAck // counter key cas/w → value at index
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer lists the members in another order.
			servers := c.httpAddrs()
			for i := 0; i < w; i++ {
				servers = append(servers[1:], servers[0])
			}
			cl := c.client(servers, 40)
			casKey := fmt.Sprintf("cas/%d", w)
			var casIndex uint64 // index of the last acknowledged CAS (0: key absent)
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Now()
				if i%5 == 4 {
					v := fmt.Sprintf("w%d-%d", w, i)
					res, err := cl.Put(bg, casKey, []byte(v), &casIndex)
					var e *client.Error
					switch {
					case err == nil:
						casIndex = res.Index
						mu.Lock()
						casAcks = append(casAcks, raftAck{key: casKey, value: v, index: res.Index, sent: sent, at: time.Now()})
						mu.Unlock()
					case errors.As(err, &e) && e.Code == "condition_failed":
						t.Errorf("writer %d: CAS at %d failed though this writer alone writes %s: %v", w, casIndex, casKey, err)
						return
					default:
						// Unknown outcome: learn the key's index again.
						if v, err := cl.Get(bg, casKey, client.ReadOptions{}); err == nil {
							casIndex = v.Index
						}
					}
					continue
				}
				k := fmt.Sprintf("k/%d/%d", w, i)
				v := fmt.Sprintf("v%d", i)
				res, err := cl.Put(bg, k, []byte(v), nil)
				if err != nil {
					continue // outcome unknown: the checker allows it either way
				}
				mu.Lock()
				acks = append(acks, raftAck{key: k, value: v, index: res.Index, sent: sent, at: time.Now()})
				mu.Unlock()
			}
		}()
	}
	var failovers []time.Duration
	for k := 0; k < kills; k++ {
		time.Sleep(700 * time.Millisecond)
		lead := c.leader(15 * time.Second)
		killed := time.Now()
		lead.p.kill()
		// The first acknowledged write sent after the kill.
		var first time.Time
		for deadline := time.Now().Add(20 * time.Second); first.IsZero() && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			for _, a := range append(acks, casAcks...) {
				if a.sent.After(killed) && (first.IsZero() || a.at.Before(first)) {
					first = a.at
				}
			}
			mu.Unlock()
		}
		if first.IsZero() {
			t.Fatalf("kill %d: no write acknowledged within 20s", k+1)
		}
		failovers = append(failovers, first.Sub(killed))
		t.Logf("kill %d (member %d): next acknowledged write after %v", k+1, lead.id, first.Sub(killed).Round(time.Millisecond))
		c.start(lead)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	c.leader(15 * time.Second)
	if os.Getenv("QS_TEST_LOG") == "" {
		c.waitSameApplied(0, 30*time.Second)
	} else {
		time.Sleep(3 * time.Second)
	}
	log := c.checkSameStores()
	checkRaftLog(t, log, acks, casAcks)
	slices.Sort(failovers)
	p := func(q float64) time.Duration { return failovers[min(len(failovers)-1, int(q*float64(len(failovers))))] }
	t.Logf("%d kills, %d writes and %d CAS acknowledged; failover p50 %v p99 %v max %v",
		kills, len(acks), len(casAcks), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond))
	if len(acks) < 20 {
		t.Fatalf("only %d writes acknowledged", len(acks))
	}
}

// checkRaftLog checks every acknowledged write is in the log at its index,
// exactly once for keys under "k/" (each written once), and that each CAS
// key's acknowledged values appear at their indexes.
func checkRaftLog(t *testing.T, log []wal.Entry, acks, casAcks []raftAck) {
	t.Helper()
	if len(log) == 0 || log[0].Index != 1 {
		t.Fatalf("log does not start at 1 (%d entries)", len(log))
	}
	byIndex := map[uint64]wal.Entry{}
	count := map[string]int{}
	for _, e := range log {
		byIndex[e.Index] = e
		for _, op := range e.Ops {
			if strings.HasPrefix(string(op.Key), "k/") {
				count[string(op.Key)]++
			}
		}
	}
	for _, a := range append(slices.Clone(acks), casAcks...) {
		e, ok := byIndex[a.index]
		if !ok {
			t.Fatalf("acknowledged write %s=%s at %d: no such entry", a.key, a.value, a.index)
		}
		found := false
		for _, op := range e.Ops {
			if string(op.Key) == a.key && string(op.Value) == a.value && op.Type == wal.OpSet {
				found = true
			}
		}
		if !found {
			t.Fatalf("acknowledged write %s=%s at %d: the entry holds %v", a.key, a.value, a.index, e.Ops)
		}
	}
	for _, a := range acks {
		if strings.HasPrefix(a.key, "k/") && count[a.key] != 1 {
			t.Fatalf("acknowledged write %s appears %d times in the log", a.key, count[a.key])
		}
	}
}
