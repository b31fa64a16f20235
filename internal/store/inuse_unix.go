//go:build unix

package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// inUse turns the storage engine's failure to lock dir's LOCK file
// (EAGAIN: another process holds it) into ErrInUse, naming the holder's
// pid when the kernel reports it. Other errors are returned as they are.
func inUse(dir string, err error) error {
	if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
		return err
	}
	if pid := lockHolder(filepath.Join(dir, "LOCK")); pid > 0 {
		return fmt.Errorf("%w (locked by process %d: another qs serve on this data directory?); stop it or choose another --data", ErrInUse, pid)
	}
	return fmt.Errorf("%w (locked by another process: another qs serve on this data directory?); stop it or choose another --data", ErrInUse)
}

// lockHolder is the pid of a process holding a POSIX write lock on path,
// or 0 if none is known.
func lockHolder(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	spec := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &spec); err != nil || spec.Type == unix.F_UNLCK {
		return 0
	}
	return int(spec.Pid)
}
