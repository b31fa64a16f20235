// Package ctrim returns the C allocator's free memory to the system.
//
// In a build with cgo the storage engine allocates its block cache and
// memtables with the C library's malloc (see internal/gcfloor). glibc's
// malloc gives memory back to the system only from the top of each arena:
// a block freed below a block still in use stays resident, and with one
// arena per busy thread the held pages add up. Under steady writes the
// cache evicts and the memtables rotate for good, and the process's
// resident memory crept up by 13% in 25 minutes with the Go heap flat
// (23% in 20 minutes with MALLOC_ARENA_MAX=2).
// glibc's malloc_trim(0) walks every arena and releases the free pages
// inside it (madvise), not only at its top. Run calls it every 30 s
// while that gives memory back, backing off to every 5 minutes while it
// finds little (NextInterval): a trim locks each arena in turn, so a C
// allocation on another thread may wait for it.
//
// It does nothing in a build without cgo (the engine's memory is then Go
// heap, returned by the Go runtime), nor with a C library that has no
// malloc_trim (musl); Available reports which.
package ctrim
