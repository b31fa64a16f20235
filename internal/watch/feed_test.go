package watch

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func batchOf(index uint64, keys ...string) *Batch {
	var evs []Event
	for _, k := range keys {
		evs = append(evs, Event{Index: index, Key: []byte(k), Value: []byte("0123456789")})
	}
	return newBatch(evs)
}

// retained lists the indexes of the batches a reader starting at from
// can still read, stopping at the first evicted one.
func retained(from *node) []uint64 {
	var out []uint64
	for n := from.next.Load(); n != nil; n = n.next.Load() {
		b := n.batch.Load()
		if b == nil && n.err == nil {
			out = append(out, 0) // evicted
			continue
		}
		if b != nil {
			out = append(out, b.Last())
		}
	}
	return out
}

// TestFeedBounds: a feed keeps the newest batches within its count and
// byte bounds, always the newest one, and a reader that started before
// the evicted ones finds them empty.
func TestFeedBounds(t *testing.T) {
	f := newFeed([]byte("p"), 3, 1<<20)
	start := f.tail
	for i := range 5 {
		f.append(batchOf(uint64(i+1), "p1"))
	}
	if got := fmt.Sprint(retained(start)); got != "[0 0 3 4 5]" {
		t.Fatalf("count bound 3: %s", got)
	}
	if f.retained != 3 || f.bytes != 3*12 {
		t.Fatalf("retained %d batches, %d bytes", f.retained, f.bytes)
	}

	f = newFeed([]byte("p"), 100, 30) // 12 bytes a batch: two fit
	start = f.tail
	for i := range 4 {
		f.append(batchOf(uint64(i+1), "p1"))
	}
	if got := fmt.Sprint(retained(start)); got != "[0 0 3 4]" {
		t.Fatalf("byte bound 30: %s", got)
	}
	f.append(batchOf(5, "p1", "p2", "p3", "p4")) // 48 bytes alone: kept
	if got := fmt.Sprint(retained(start)); got != "[0 0 0 0 5]" || f.retained != 1 {
		t.Fatalf("oversized newest batch: %s, %d retained", got, f.retained)
	}
}

// TestFeedErr: an error node ends the feed for its readers, is never
// evicted, and eviction skips over it.
func TestFeedErr(t *testing.T) {
	f := newFeed([]byte("p"), 2, 1<<20)
	start := f.tail
	f.append(batchOf(1, "p"))
	cut := errors.New("cut")
	f.appendErr(cut)
	f.append(batchOf(2, "p"))
	f.append(batchOf(3, "p"))
	n := start.next.Load()
	if n.batch.Load() != nil {
		t.Fatal("batch 1 not evicted")
	}
	if e := n.next.Load(); e.err != cut {
		t.Fatalf("error node %+v", e)
	}
	if got := fmt.Sprint(retained(start)); got != "[0 2 3]" {
		t.Fatalf("after the error: %s", got)
	}
	select {
	case <-start.ready:
	default:
		t.Fatal("ready of a node with a successor not closed")
	}
	select {
	case <-f.tail.ready:
		t.Fatal("ready of the tail closed")
	default:
	}
}

// TestBatchEncodedOnce: however many subscribers encode a batch at once,
// the encoder runs once and all get the same bytes.
func TestBatchEncodedOnce(t *testing.T) {
	b := batchOf(7, "a", "b")
	var calls atomic.Int32
	enc := func(dst []byte, evs []Event) []byte {
		calls.Add(1)
		for _, e := range evs {
			dst = append(dst, e.Key...)
		}
		return dst
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := string(b.Encoded(enc)); got != "ab" {
				t.Errorf("encoded %q", got)
			}
		}()
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("encoder ran %d times", calls.Load())
	}
}
