package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// BenchmarkWrite40KB measures durable writes of new keys with 40 kB random
// (incompressible) values from 2 concurrent writers, the write load of the
// readlat benchmark.
func BenchmarkWrite40KB(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 40<<10)
	rand.Read(val)
	var n atomic.Int64
	b.SetBytes(int64(len(val)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := n.Add(1)
				if i > int64(b.N) {
					return
				}
				op := wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "w%d-%d", w, i), Value: val}
				if _, err := s.Write(context.Background(), Batch{Ops: []wal.Op{op}}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportHist(b, "qs_store_sync_seconds", "sync-µs/commit")
	reportHist(b, "qs_store_commit_seconds", "commit-µs/commit")
	reportHist(b, "qs_store_commit_group_requests", "")
}

// reportHist reports the mean of a store histogram as a benchmark metric.
func reportHist(b *testing.B, name, unit string) {
	mfs, _ := metrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		var n uint64
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			n += m.GetHistogram().GetSampleCount()
		}
		if n == 0 {
			return
		}
		if unit == "" {
			b.ReportMetric(sum/float64(n), "reqs/commit")
			return
		}
		b.ReportMetric(sum/float64(n)*1e6, unit)
	}
}
