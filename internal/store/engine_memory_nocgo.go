//go:build !cgo

package store

// engineInGoHeap: without cgo, the storage engine allocates its block
// cache and memtables from the Go heap.
const engineInGoHeap = true
