// Package gcfloor keeps the Go garbage collector from running more often
// than once per Floor bytes of allocation while the live heap is small.
//
// With GOGC's default of 100, the collector starts when the heap has grown
// by as much as was live after the last cycle. A qs server's live heap,
// besides the storage engine's caches, is a few MB, while a stream of large writes allocates tens of MB per second (request
// buffers, log blocks read back for replicas and watchers): measured under
// the readlat benchmark's two 40 kB writers, about 40 cycles a second, each
// with two stop-the-world pauses that land in read latencies. Raising GOGC
// for good would let a large live heap grow by as much again; instead,
// after each cycle Run sets GOGC so that the next cycle starts once the
// heap reaches max(Floor, live × (1 + base/100)): a floor for small heaps,
// the usual proportional rule for large ones.
//
// The storage engine's block cache and memtables (up to the block cache
// size, 256 MiB by default) are allocated from the C library in a build
// with cgo, and from the Go heap in a build without (the container
// image). There they are live heap like any other, and the proportional
// rule would give them as much again of headroom: about twice the cache
// in resident memory once it fills. Run takes their size from its cached
// function and leaves them out of the rule: the next cycle starts at
// cached + max(Floor, (live − cached) × (1 + base/100)).
//
// GOGC and GOMEMLIMIT set in the environment still rule: Run does nothing
// if GOGC is set, and a memory limit makes the collector run earlier when
// it is approached, whatever GOGC says.
package gcfloor
