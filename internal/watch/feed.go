package watch

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// Batch is the changes under one prefix of one hub read: what every live
// subscriber of that prefix receives, shared between them. It is immutable.
type Batch struct {
	// Events are in index order; an entry's changes are never split
	// across batches.
	Events []Event
	size   int // bytes of keys and values, for Config.BufferBytes and CoalesceBytes

	enc struct {
		once sync.Once
		b    []byte
	}
}

func newBatch(evs []Event) *Batch {
	b := &Batch{Events: evs}
	for i := range evs {
		b.size += len(evs[i].Key) + len(evs[i].Value)
	}
	return b
}

// Last is the index of the batch's last change.
func (b *Batch) Last() uint64 { return b.Events[len(b.Events)-1].Index }

// Encoded returns encode(nil, b.Events), computed by the first caller and
// shared by every subscriber of the batch: a change reaching many watchers
// is encoded once. Every caller must pass the same encode; the result must
// not be modified.
func (b *Batch) Encoded(encode func(dst []byte, evs []Event) []byte) []byte {
	b.enc.once.Do(func() { b.enc.b = encode(nil, b.Events) })
	return b.enc.b
}

// node is one element of a feed: a batch, or the error that ends every
// subscriber reaching it. Nodes are appended by the hub only; subscribers
// follow next pointers on their own goroutines, without the hub's lock.
type node struct {
	seq   uint64
	batch atomic.Pointer[Batch] // nil once evicted (and in a feed's first node)
	err   error                 // set before the node is published; never evicted
	next  atomic.Pointer[node]
	ready chan struct{} // closed once next is set
}

func newNode(seq uint64) *node { return &node{seq: seq, ready: make(chan struct{})} }

// feed is the changes under one prefix, shared by the prefix's live
// subscribers: the hub appends each batch once, and each subscriber keeps
// its own cursor (the last node it consumed). The feed retains the newest
// batches within its bounds and evicts the oldest beyond them; a
// subscriber that reaches an evicted node fell behind (ErrSlow). Memory is
// thus bounded per prefix, whatever the number of subscribers; a
// subscriber stuck in a write pins only evicted (empty) nodes past the
// bound. Guarded by the hub's lock, except what subscribers read through
// node's atomics.
type feed struct {
	prefix     []byte
	pending    []Event // the hub's batch under construction
	subs       int     // live subscribers
	tail       *node   // newest node; where a joining subscriber starts
	oldest     *node   // oldest node still holding its batch
	retained   int     // batches held from oldest to tail
	bytes      int     // their size
	maxBatches int
	maxBytes   int
}

func newFeed(prefix []byte, maxBatches, maxBytes int) *feed {
	n := newNode(0)
	return &feed{prefix: prefix, tail: n, oldest: n, maxBatches: maxBatches, maxBytes: maxBytes}
}

// append publishes b to the feed's subscribers and evicts the oldest
// batches beyond the bounds; the newest batch is always kept.
func (f *feed) append(b *Batch) {
	n := f.link()
	n.batch.Store(b)
	f.publish(n)
	f.retained++
	f.bytes += b.size
	for f.retained > 1 && (f.retained > f.maxBatches || f.bytes > f.maxBytes) {
		f.evictOldest()
	}
}

// appendErr ends every subscriber of the feed with err once it has
// consumed what came before.
func (f *feed) appendErr(err error) {
	n := f.link()
	n.err = err
	f.publish(n)
}

func (f *feed) link() *node { return newNode(f.tail.seq + 1) }

func (f *feed) publish(n *node) {
	prev := f.tail
	prev.next.Store(n)
	close(prev.ready)
	f.tail = n
}

// evictOldest drops the oldest retained batch.
func (f *feed) evictOldest() {
	for n := f.oldest; n != nil; n = n.next.Load() {
		if b := n.batch.Load(); b != nil {
			n.batch.Store(nil)
			f.retained--
			f.bytes -= b.size
			f.oldest = n.next.Load()
			return
		}
	}
}

// feedIndex holds the feeds by prefix and finds those a key falls under
// with one map lookup per distinct prefix length, rather than one prefix
// comparison per feed: the hub's work per change stays small with
// thousands of distinct prefixes. Guarded by the hub's lock.
type feedIndex struct {
	byPrefix map[string]*feed
	lengths  []int       // distinct prefix lengths, ascending
	perLen   map[int]int // feeds per prefix length
}

func newFeedIndex() *feedIndex {
	return &feedIndex{byPrefix: map[string]*feed{}, perLen: map[int]int{}}
}

func (x *feedIndex) get(prefix []byte) *feed { return x.byPrefix[string(prefix)] }

func (x *feedIndex) len() int { return len(x.byPrefix) }

func (x *feedIndex) add(f *feed) {
	x.byPrefix[string(f.prefix)] = f
	l := len(f.prefix)
	if x.perLen[l]++; x.perLen[l] == 1 {
		i := sort.SearchInts(x.lengths, l)
		x.lengths = slices.Insert(x.lengths, i, l)
	}
}

func (x *feedIndex) remove(f *feed) {
	delete(x.byPrefix, string(f.prefix))
	l := len(f.prefix)
	if x.perLen[l]--; x.perLen[l] == 0 {
		delete(x.perLen, l)
		i := sort.SearchInts(x.lengths, l)
		x.lengths = slices.Delete(x.lengths, i, i+1)
	}
}

// appendMatching appends to dst the feeds whose prefix key starts with,
// shortest prefix first.
func (x *feedIndex) appendMatching(dst []*feed, key []byte) []*feed {
	for _, l := range x.lengths {
		if l > len(key) {
			break
		}
		if f := x.byPrefix[string(key[:l])]; f != nil {
			dst = append(dst, f)
		}
	}
	return dst
}
