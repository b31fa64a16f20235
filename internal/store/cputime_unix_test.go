//go:build unix

package store

import "syscall"

// processCPU returns the user and system CPU time this process used, in
// nanoseconds (0 if unknown).
func processCPU() int64 {
	user, sys := processCPUSplit()
	return user + sys
}

// processCPUSplit returns the user and the system CPU time this process
// used, in nanoseconds (0 if unknown).
func processCPUSplit() (user, sys int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return ru.Utime.Nano(), ru.Stime.Nano()
}
