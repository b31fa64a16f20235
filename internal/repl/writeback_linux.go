package repl

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's bytes [off,
// off+n) to disk now, without waiting (sync_file_range with
// SYNC_FILE_RANGE_WRITE), so that the fsync that makes the file durable
// finds little left to write: the disk works while the network does.
func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
