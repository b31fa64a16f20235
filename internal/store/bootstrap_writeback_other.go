//go:build !linux

package store

import "github.com/cockroachdb/pebble/v2/vfs"

// startWriteback is a no-op where sync_file_range does not exist: the
// fsync of the whole file does all the writing.
func startWriteback(f vfs.File, off, n int64) {}
