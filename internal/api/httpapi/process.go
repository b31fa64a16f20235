package httpapi

import (
	"runtime/metrics"

	"github.com/quicksilver-kv/qs/internal/ctrim"
)

// ProcessDoc is the memory of the node's process, in GET /v1/node.
type ProcessDoc struct {
	// ResidentBytes is the process's resident memory (0: unknown, off
	// Linux).
	ResidentBytes int64 `json:"resident_bytes"`
	// GoHeapBytes are the live and not yet collected objects of the Go
	// heap.
	GoHeapBytes uint64 `json:"go_heap_bytes"`
	// AllocatorTrims is there in a process that trims its C allocator
	// (cgo, glibc, and no trim threshold set in the environment;
	// internal/ctrim).
	AllocatorTrims *AllocatorTrimsDoc `json:"allocator_trims,omitempty"`
}

// AllocatorTrimsDoc counts the C allocator's trims since the process
// started.
type AllocatorTrimsDoc struct {
	Trims         int64 `json:"trims"`
	ReleasedBytes int64 `json:"released_bytes"`
}

// ReadProcess reads the process's memory now.
func ReadProcess() ProcessDoc {
	var p ProcessDoc
	p.ResidentBytes, _ = ctrim.ResidentBytes()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		p.GoHeapBytes = s[0].Value.Uint64()
	}
	if ctrim.Trimming() {
		n, b := ctrim.Totals()
		p.AllocatorTrims = &AllocatorTrimsDoc{Trims: n, ReleasedBytes: b}
	}
	return p
}
