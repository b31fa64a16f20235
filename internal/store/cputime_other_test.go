//go:build !unix

package store

func processCPUSplit() (user, sys int64) { return 0, 0 }
