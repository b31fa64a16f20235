//go:build !unix

package store

func processCPU() int64 { return 0 }
