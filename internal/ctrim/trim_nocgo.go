//go:build !cgo

package ctrim

// Without cgo the process has no C allocator to trim.
func available() bool { return false }

func trim() {}

func keepLargeBlocksMapped() {}
