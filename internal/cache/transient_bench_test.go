package cache

import (
	"container/list"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkTransientTierDiskWrites replays a Zipf read stream (s = 1.1
// over 1M keys of 1 KiB) against a proxy's two cache tiers, as policy
// only: a disk cache of 64 MiB (LRU, a stand-in for the store's CLOCK)
// with and without a 16 MiB transient tier in front; and, without the
// tier, a disk cache of 69 MiB (the tier's hit rate within 0.01 points:
// the comparison at the same hit rate) and one of 80 MiB (the same bytes
// as disk and tier together). It reports the hit rate (disk or memory)
// and the disk writes per 1,000 reads.
func BenchmarkTransientTierDiskWrites(b *testing.B) {
	const (
		keys      = 1 << 20
		valueSize = 1 << 10
		reads     = 2_000_000
	)
	for _, c := range []struct{ disk, transient int64 }{{64 << 20, 0}, {64 << 20, 16 << 20}, {69 << 20, 0}, {80 << 20, 0}} {
		b.Run(fmt.Sprintf("disk=%dMiB/transient=%dMiB", c.disk>>20, c.transient>>20), func(b *testing.B) {
			var hits, writes int
			for range b.N {
				hits, writes = replayZipf(keys, valueSize, c.disk, c.transient, reads)
			}
			b.ReportMetric(100*float64(hits)/reads, "hit%")
			b.ReportMetric(1000*float64(writes)/reads, "disk-writes/1k-reads")
		})
	}
}

// replayZipf reads n keys drawn from a Zipf law; a miss is "fetched" and
// offered to the transient tier (or stored at once without one).
func replayZipf(keys, valueSize int, diskBytes, transient int64, n int) (hits, writes int) {
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.1, 1, uint64(keys-1))
	disk := newLRU(int(diskBytes / int64(valueSize)))
	tr := NewTransient(transient, diskBytes)
	value := make([]byte, valueSize)
	key := make([]byte, 0, 16)
	for range n {
		k := z.Uint64()
		key = fmt.Appendf(key[:0], "k%07d", k)
		if disk.get(k) {
			hits++
			continue
		}
		if _, ok := tr.Take(key, 1); ok {
			hits++
			disk.put(k)
			writes++
			continue
		}
		if d, _ := tr.Offer(key, 1, value); d == Store {
			disk.put(k)
			writes++
		}
	}
	return hits, writes
}

// lru is a fixed-capacity LRU set of keys (the disk cache's stand-in).
type lru struct {
	max   int
	order list.List
	at    map[uint64]*list.Element
}

func newLRU(max int) *lru { return &lru{max: max, at: map[uint64]*list.Element{}} }

func (l *lru) get(k uint64) bool {
	if el, ok := l.at[k]; ok {
		l.order.MoveToFront(el)
		return true
	}
	return false
}

func (l *lru) put(k uint64) {
	if l.get(k) {
		return
	}
	l.at[k] = l.order.PushFront(k)
	if l.order.Len() > l.max {
		el := l.order.Back()
		l.order.Remove(el)
		delete(l.at, el.Value.(uint64))
	}
}
