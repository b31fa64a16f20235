//go:build cgo

package ctrim

/*
#include <stdlib.h>
#include <string.h>

// A weak reference: glibc has malloc_trim, other C libraries (musl) may
// not, and the reference is then NULL instead of a link error.
extern int malloc_trim(size_t pad) __attribute__((weak));

static int qs_trim_available(void) { return malloc_trim != NULL; }
static void qs_trim(void) { if (malloc_trim != NULL) malloc_trim(0); }

// glibc's mallopt, and its parameter for the size from which a block is
// mapped on its own (mmap) rather than carved from an arena.
extern int mallopt(int param, int value) __attribute__((weak));
#define QS_M_MMAP_THRESHOLD (-3)

// Sets glibc's mmap threshold to its default, 128 KiB, which also stops
// glibc from raising it: by default each mapped block freed raises the
// threshold to its size (up to 32 MiB), so that once one of the engine's
// memtables is freed the next ones come from the arenas, and freeing them
// leaves holes there.
static void qs_keep_large_blocks_mapped(void) {
	if (malloc_trim != NULL && mallopt != NULL) mallopt(QS_M_MMAP_THRESHOLD, 128 * 1024);
}

// Writes a byte of every page of p (volatile: a compiler may drop a
// memset of memory that is freed unread).
static void qs_touch(void *p, size_t n) {
	volatile char *c = p;
	for (size_t i = 0; i < n; i += 4096) c[i] = 1;
}

// For the tests: allocates and frees a block of size bytes, then
// allocates another, resident, and a small one after it; returns the
// large one.
static void *qs_large_after_large(size_t size, void **pin) {
	void *p = malloc(size);
	qs_touch(p, size);
	free(p);
	p = malloc(size);
	qs_touch(p, size);
	*pin = malloc(64 << 10);
	qs_touch(*pin, 64 << 10);
	return p;
}

// For the tests: n blocks of size bytes, written so they are resident.
static void **qs_alloc_blocks(int n, size_t size) {
	void **p = malloc(n * sizeof(void *));
	for (int i = 0; i < n; i++) {
		p[i] = malloc(size);
		memset(p[i], 1, size);
	}
	return p;
}

// For the tests: frees every block but each keep-th (and the last, which
// holds the arena's top), as a cache does when it evicts.
static void qs_free_blocks(void **p, int n, int keep) {
	for (int i = 0; i < n - 1; i++) {
		if (i % keep != 0) {
			free(p[i]);
			p[i] = NULL;
		}
	}
}

// For the benchmark: frees every other block, leaving its pages resident
// in the arena as free chunks.
static void qs_free_every_other(void **p, int n) {
	for (int i = 0; i < n; i += 2) {
		free(p[i]);
		p[i] = NULL;
	}
}

// For the benchmark: allocates again the blocks qs_free_every_other
// freed.
static void qs_refill_every_other(void **p, int n, size_t size) {
	for (int i = 0; i < n; i += 2) {
		p[i] = malloc(size);
		memset(p[i], 1, size);
	}
}

// For the benchmark: frees every other block and allocates it again, as
// a cache that evicts and refills does (in one call: on one thread).
static void qs_churn_blocks(void **p, int n, size_t size) {
	qs_free_every_other(p, n);
	qs_refill_every_other(p, n, size);
}

// For the benchmark: allocates a block of size bytes, writes it and frees
// it, as a cache miss does with the block it reads.
static void qs_alloc_write_free(size_t size) {
	void *p = malloc(size);
	qs_touch(p, size);
	free(p);
}

static void qs_free_all(void **p, int n) {
	for (int i = 0; i < n; i++) free(p[i]);
	free(p);
}
*/
import "C"

import "unsafe"

func available() bool { return C.qs_trim_available() != 0 }

func trim() { C.qs_trim() }

func keepLargeBlocksMapped() { C.qs_keep_large_blocks_mapped() }

// largeAfterLarge allocates and frees a block of size bytes, then
// allocates another, resident, and a small block after it.
func largeAfterLarge(size int) (large, pin unsafe.Pointer) {
	large = C.qs_large_after_large(C.size_t(size), &pin)
	return large, pin
}

// cfree frees a block of the C heap.
func cfree(p unsafe.Pointer) { C.free(p) }

// cBlocks are blocks of C memory, for the tests.
type cBlocks struct {
	p unsafe.Pointer
	n int
}

// allocBlocks allocates n resident blocks of size bytes from the C heap.
func allocBlocks(n, size int) cBlocks {
	return cBlocks{p: unsafe.Pointer(C.qs_alloc_blocks(C.int(n), C.size_t(size))), n: n}
}

// freeMost frees every block but each keep-th and the last.
func (b cBlocks) freeMost(keep int) {
	C.qs_free_blocks((*unsafe.Pointer)(b.p), C.int(b.n), C.int(keep))
}

// churn frees every other block and allocates it again.
func (b cBlocks) churn(size int) {
	C.qs_churn_blocks((*unsafe.Pointer)(b.p), C.int(b.n), C.size_t(size))
}

// freeEveryOther frees every other block; refillEveryOther allocates them
// again.
func (b cBlocks) freeEveryOther() { C.qs_free_every_other((*unsafe.Pointer)(b.p), C.int(b.n)) }

func (b cBlocks) refillEveryOther(size int) {
	C.qs_refill_every_other((*unsafe.Pointer)(b.p), C.int(b.n), C.size_t(size))
}

// allocWriteFree allocates a block of size bytes, writes it and frees it.
func allocWriteFree(size int) { C.qs_alloc_write_free(C.size_t(size)) }

// free frees the remaining blocks.
func (b cBlocks) free() { C.qs_free_all((*unsafe.Pointer)(b.p), C.int(b.n)) }
