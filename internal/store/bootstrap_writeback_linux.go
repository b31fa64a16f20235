package store

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's bytes [off,
// off+n) to disk now, without waiting (sync_file_range with
// SYNC_FILE_RANGE_WRITE), so that the fsync that makes the file durable
// finds little left to write: the disk works while the network does. A
// file with no descriptor (a memory filesystem) has nothing to start.
func startWriteback(f vfs.File, off, n int64) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}
