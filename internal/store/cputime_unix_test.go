//go:build unix

package store

import "syscall"

// processCPUSplit returns the user and the system CPU time this process
// used, in nanoseconds (0 if unknown).
func processCPUSplit() (user, sys int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return ru.Utime.Nano(), ru.Stime.Nano()
}
