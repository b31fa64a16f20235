// Package ctrim keeps the C allocator from holding on to freed memory.
//
// In a build with cgo the storage engine allocates its block cache and
// memtables with the C library's malloc (see internal/gcfloor). glibc's
// malloc gives memory back to the system only from the top of each arena:
// a block freed below a block still in use stays resident, and with one
// arena per busy thread the held pages add up. Under steady writes the
// cache evicts and the memtables rotate for good, and the process's
// resident memory crept up by 8–9% in 25 minutes with the Go heap flat.
// Two remedies, both needed in measurements. glibc raises its mmap
// threshold to the size of each mapped block freed (up to 32 MiB), so
// once one of the engine's 8 MiB memtables is freed the next ones come
// from the arenas and leave holes there: Run fixes the threshold at its
// default, 128 KiB, which keeps them mapped on their own. And glibc's
// malloc_trim(0) walks every arena and releases the free pages inside it
// (madvise), not only at its top: Run calls it every 30 s
// while that gives memory back, backing off to every 5 minutes while it
// finds little (NextInterval): a trim locks each arena in turn, so a C
// allocation on another thread may wait for it. With both, resident
// memory under churn rose 2.7–7.9% in 25 minutes (8–9% with neither; up
// to 12% with the trims alone).
//
// It does nothing in a build without cgo (the engine's memory is then Go
// heap, returned by the Go runtime), nor with a C library that has no
// malloc_trim (musl); Available reports which.
package ctrim
