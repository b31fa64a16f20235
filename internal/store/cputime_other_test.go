//go:build !unix

package store

func processCPU() int64 { return 0 }

func processCPUSplit() (user, sys int64) { return 0, 0 }
