//go:build cgo

package store

// engineInGoHeap: with cgo, the storage engine allocates its block cache
// and memtables with the C allocator.
const engineInGoHeap = false
