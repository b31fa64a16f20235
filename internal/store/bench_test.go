package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/sstable/block/blockkind"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// BenchmarkWrite40KB measures durable writes of new keys with 40 kB random
// (incompressible) values from 2 concurrent writers, the write load of the
// readlat benchmark, with log blocks stored uncompressed and with zstd (the
// server's default). Every value is different (consecutive slices of a
// random pool), so a block of several values cannot compress.
//
// log-full: the same, zstd, once the log is at its retention limit (32 MiB
// here; 1 GiB by default, which the readlat benchmark reaches during its
// 2-writer phase): every commit also drops the oldest block from the log,
// deciding its fate from its summary (blocks-read/op counts the blocks it
// had to read back instead).
func BenchmarkWrite40KB(b *testing.B) {
	for _, c := range []struct {
		name string
		c    wal.Compression
		full bool
	}{{"none", wal.CompressNone, false}, {"zstd", wal.CompressZstd, false}, {"log-full", wal.CompressZstd, true}} {
		b.Run(c.name, func(b *testing.B) { benchWrite40KB(b, c.c, c.full) })
	}
}

func benchWrite40KB(b *testing.B, c wal.Compression, logFull bool) {
	name := fmt.Sprintf("bench-%s-%d", b.Name(), b.N)
	o := Options{Dir: b.TempDir(), Name: name, Compression: c}
	if logFull {
		o.Retention.MaxBytes = 32 << 20
	}
	s, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const size = 40 << 10
	pool := make([]byte, 8<<20)
	rand.Read(pool)
	if logFull {
		for i := range 1000 { // 40 MB
			off := i * (size + 1) % (len(pool) - size)
			op := wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "fill-%d", i), Value: pool[off : off+size]}
			if _, err := s.Write(context.Background(), Batch{Ops: []wal.Op{op}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	materialized := s.Metrics().ValuesMaterialized
	byBlock, bySummary := s.Metrics().LogBlocksDropped["block"], s.Metrics().LogBlocksDropped["summary"]
	// Only the writes measured: not those filling the log.
	reports := []func(){
		histReporter(b, func() Histogram { return s.Metrics().SyncSeconds }, "sync-µs/commit"),
		histReporter(b, func() Histogram { return s.Metrics().CommitSeconds }, "commit-µs/commit"),
		histReporter(b, func() Histogram { return s.Metrics().CommitGroupRequests }, "reqs/commit"),
	}
	b.SetBytes(size)
	b.ResetTimer()
	reportCPU(b)
	writeConcurrently(b, s, 2, func(w int, i int64) Batch {
		off := int(i) * (size + 1) % (len(pool) - size)
		return Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: fmt.Appendf(nil, "w%d-%d", w, i), Value: pool[off : off+size]}}}
	})
	b.StopTimer()
	for _, r := range reports {
		r()
	}
	if logFull {
		b.ReportMetric((s.Metrics().ValuesMaterialized-materialized)/float64(b.N), "copied-out/op")
		// Blocks dropped from the log, and how many of them retention had
		// to read back (no summary, summary.go).
		dropped := s.Metrics().LogBlocksDropped["block"] - byBlock
		dropped2 := s.Metrics().LogBlocksDropped["summary"] - bySummary
		b.ReportMetric((dropped+dropped2)/float64(b.N), "dropped/op")
		b.ReportMetric(dropped/float64(b.N), "blocks-read/op")
	}
}

// histReporter reports, when the benchmark ends, the mean of what the
// histogram read by h observed from now on, as a metric in unit (µs when
// the histogram is in seconds, "reqs/commit" for the group size).
func histReporter(b *testing.B, h func() Histogram, unit string) func() {
	h0 := h()
	sum0, n0 := h0.Sum, h0.Count
	return func() {
		h1 := h()
		sum, n := h1.Sum, h1.Count
		if n == n0 {
			return
		}
		mean := (sum - sum0) / float64(n-n0)
		if unit != "reqs/commit" {
			mean *= 1e6
		}
		b.ReportMetric(mean, unit)
	}
}

// BenchmarkMultiGet100 reads 100 random keys of 100k at one view, the
// multi-get of the get benchmark, with the keys in request order and sorted.
func BenchmarkMultiGet100(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), MinFreeBytes: 1, BallastBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 100_000
	val := make([]byte, 100)
	for i := 0; i < n; i += 10_000 {
		ops := make([]wal.Op, 10_000)
		for j := range ops {
			ops[j] = wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "k%06d", i+j), Value: val}
		}
		if _, err := s.Write(context.Background(), Batch{Ops: ops}); err != nil {
			b.Fatal(err)
		}
	}
	if flush := os.Getenv("QS_BENCH_FLUSH"); flush != "" {
		s.db.Flush()
	}
	keys := make([][]byte, 100)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k%06d", (i*7919+13)%n)
	}
	run := func(b *testing.B, keys [][]byte) {
		for i := 0; i < b.N; i++ {
			v, err := s.View()
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				if _, _, ok, err := v.Get(k); !ok || err != nil {
					b.Fatal("missing", string(k), err)
				}
			}
			v.Close()
		}
	}
	b.Run("request-order", func(b *testing.B) { run(b, keys) })
	sorted := append([][]byte(nil), keys...)
	slices.SortFunc(sorted, bytes.Compare)
	b.Run("sorted", func(b *testing.B) { run(b, sorted) })
	b.Run("view-only", func(b *testing.B) { run(b, nil) })
}

// BenchmarkDiskWriteFsync is the floor under every durable commit: one
// write and fsync of a file in the test's directory, per size.
func BenchmarkDiskWriteFsync(b *testing.B) {
	for _, size := range []int{4 << 10, 80 << 10, 160 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			f, err := os.Create(b.TempDir() + "/probe")
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLookup compares reading hot keys through the read cache with
// reading them from Pebble (cache disabled), in the same run: one key per
// request and 100 keys per request, over 100,000 keys of 100 bytes,
// requests touching a hot set of 10,000 of them or all of them (both fit
// the cache; the second misses the CPU caches more).
//
//	go test -run XXX -bench Lookup -benchtime 2s ./internal/store/
func BenchmarkLookup(b *testing.B) {
	for _, cache := range []struct {
		name  string
		bytes int64
	}{{"pebble", -1}, {"cached", 64 << 20}} {
		s, err := Open(Options{Dir: b.TempDir(), MinFreeBytes: 1, BallastBytes: -1, ReadCacheBytes: cache.bytes})
		if err != nil {
			b.Fatal(err)
		}
		const n = 100_000
		val := make([]byte, 100)
		for i := 0; i < n; i += 10_000 {
			ops := make([]wal.Op, 10_000)
			for j := range ops {
				ops[j] = wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "k%06d", i+j), Value: val}
			}
			if _, err := s.Write(context.Background(), Batch{Ops: ops}); err != nil {
				b.Fatal(err)
			}
		}
		s.db.Flush()
		hot := make([][]byte, 10_000)
		for i := range hot {
			hot[i] = fmt.Appendf(nil, "k%06d", (i*7919+13)%n)
		}
		all := make([][]byte, n)
		for i := range all {
			all[i] = fmt.Appendf(nil, "k%06d", (i*7919+13)%n)
		}
		// found copies each value into a reply buffer, as the memcached
		// front door does, so that reading the value's memory is measured.
		var reply []byte
		found := func(_ uint64, _ int, v []byte, _ uint64, _ bool) error {
			reply = append(reply, v...)
			return nil
		}
		for _, k := range all { // warm the cache: measure hits, not the first misses
			if _, err := s.Lookup([][]byte{k}, found); err != nil {
				b.Fatal(err)
			}
		}
		for _, set := range []struct {
			name string
			keys [][]byte
		}{{"hot-10k", hot}, {"all-100k", all}} {
			for _, per := range []int{1, 100} {
				b.Run(fmt.Sprintf("%s/%s/%d-keys", cache.name, set.name, per), func(b *testing.B) {
					reportCPU(b)
					for i := 0; b.Loop(); i++ {
						start := (i * per) % len(set.keys)
						reply = reply[:0]
						if _, err := s.Lookup(set.keys[start:start+per], found); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		s.Close()
	}
}

// BenchmarkOverwriteHistory measures what keeping the MVCC history costs
// writes that replace values: two writers overwriting a hot set of 100
// keys, with the history (the default) and without it, for small inline
// values and for 40 KiB values (stored in the log: the history has to read
// the old value back from its log block).
//
//	go test -run XXX -bench OverwriteHistory -benchtime 3000x -count 3 ./internal/store/
func BenchmarkOverwriteHistory(b *testing.B) {
	for _, size := range []int{100, 40 << 10} {
		for _, hist := range []time.Duration{0, -1} {
			name := fmt.Sprintf("value=%d/history=%v", size, hist == 0)
			b.Run(name, func(b *testing.B) {
				s, err := Open(Options{Dir: b.TempDir(), History: HistoryOptions{Retention: hist}, Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				val := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				writeConcurrently(b, s, 2, func(_ int, i int64) Batch {
					v := append([]byte(nil), val...)
					binary.BigEndian.PutUint64(v, uint64(i))
					return Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: fmt.Appendf(nil, "hot%d", i%100), Value: v}}}
				})
				b.StopTimer()
				if h, _ := s.History(); hist == 0 && b.N > 100 && h.Entries == 0 {
					b.Fatal("no history kept")
				}
			})
		}
	}
}

// BenchmarkWriteBatchID: what a batch id (an idempotent write: two small
// records, expired later) adds to a durable 100-byte write, with and
// without, in the same run. Raft roots give every write one.
func BenchmarkWriteBatchID(b *testing.B) {
	for _, withID := range []bool{false, true} {
		b.Run(fmt.Sprintf("id=%v", withID), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			reportCPU(b)
			writeConcurrently(b, s, 4, func(_ int, i int64) Batch {
				batch := Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 100)}}}
				if withID {
					batch.ID = fmt.Appendf(nil, "qs-raft:%016x", i)
				}
				return batch
			})
		})
	}
}

// BenchmarkWriteSmall is the put phase of the getput benchmark in
// process: 16 writers each setting new keys with 100-byte random values,
// one durable write at a time, log blocks compressed with zstd (the
// server's default). cpu-ns/op is the CPU a put costs the store, the
// commit's fsync included; allocs/op counts every allocation of a put.
//
//	go test -run XXX -bench WriteSmall -benchtime 20000x -count 8 ./internal/store/
func BenchmarkWriteSmall(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), Compression: wal.CompressZstd, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const size = 100
	pool := make([]byte, 1<<20+size)
	rand.Read(pool)
	groupSize := histReporter(b, func() Histogram { return s.Metrics().CommitGroupRequests }, "reqs/commit")
	b.ReportAllocs()
	b.ResetTimer()
	reportCPU(b)
	writeConcurrently(b, s, 16, func(w int, i int64) Batch {
		off := int(i) * (size + 7) % (len(pool) - size)
		return Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: fmt.Appendf(nil, "gp-%d-%d", w, i), Value: pool[off : off+size]}}}
	})
	b.StopTimer()
	groupSize()
}

// BenchmarkBlockIntoBatch measures putting a group of two 40 kB writes
// (random values) into a Pebble batch as one raw log block, the
// committer's share of a durable write apart from the Pebble commit:
// "direct" is what the committer does (bodies encoded and hashed in the
// block, the block encoded into the batch); "staged" is how it did it
// before (each body encoded into a buffer, hashed, copied into the
// block, the block finished into another buffer, copied into the batch).
// Both hash the same bytes once; they differ in copies of the values.
func BenchmarkBlockIntoBatch(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pool := make([]byte, 80<<10)
	rand.Read(pool)
	entries := func(i int) []wal.Entry {
		return []wal.Entry{
			{Index: uint64(2*i + 1), Kind: wal.KindData, Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("w0-key"), Value: pool[:40<<10]}}},
			{Index: uint64(2*i + 2), Kind: wal.KindData, Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("w1-key"), Value: pool[40<<10:]}}},
		}
	}
	b.Run("direct", func(b *testing.B) {
		c := &committer{s: s}
		b.SetBytes(80 << 10)
		for i := 0; b.Loop(); i++ {
			c.g.batch = s.db.NewBatch()
			c.g.blk.Reset()
			es := entries(i)
			c.g.blockFirst = es[0].Index
			for j := range es {
				c.g.blk.AddEntry(&es[j], c.last.hash, true)
				c.last.hash = es[j].Hash
			}
			c.setBlock(false)
			c.g.batch.Close()
		}
	})
	b.Run("staged", func(b *testing.B) {
		var blk wal.BlockBuilder
		var buf, out []byte
		var prev wal.Hash
		b.SetBytes(80 << 10)
		for i := 0; b.Loop(); i++ {
			batch := s.db.NewBatch()
			blk.Reset()
			es := entries(i)
			for j := range es {
				buf = es[j].Seal(prev, buf)
				blk.Add(buf, es[j].Hash, es[j].Time)
				prev = es[j].Hash
			}
			out = blk.Finish(out[:0], wal.CompressNone)
			batch.Set(logKey(es[0].Index), out, nil)
			batch.Close()
		}
	})
}

// BenchmarkBlobBlockCompression is Pebble's compression of one blob file
// block holding a 40 kB random value (a raw log block of the readlat
// write load), with Pebble's default profile (Snappy) and the store's
// (engineCompression: adaptive, tries Snappy on about one block in ten).
func BenchmarkBlobBlockCompression(b *testing.B) {
	src := make([]byte, 40<<10)
	rand.Read(src)
	for _, p := range []*block.CompressionProfile{block.SnappyCompression, engineCompression} {
		b.Run(p.Name, func(b *testing.B) {
			c := block.MakeCompressor(p)
			defer c.Close()
			var dst []byte
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				_, dst = c.Compress(dst, src, blockkind.BlobValue)
			}
		})
	}
}

// writeConcurrently makes b.N durable writes from the given number of
// writers, each waiting for its write before the next; batch builds write
// i (1..b.N) of writer w.
func writeConcurrently(b *testing.B, s *Store, writers int, batch func(w int, i int64) Batch) {
	var n atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := n.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := s.Write(context.Background(), batch(w, i)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
