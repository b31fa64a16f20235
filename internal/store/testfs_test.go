package store

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// quotaFS is a filesystem with a byte quota, for disk-full tests. It
// counts the size of every file written through it; a write that would
// grow the total past the quota writes what fits and fails with an error
// wrapping syscall.ENOSPC, as a full disk does. Removing a file gives its
// bytes back. GetDiskUsage reports the quota as the disk.
type quotaFS struct {
	vfs.FS
	// exempt, if set, names files the quota does not apply to.
	exempt func(name string) bool
	// chargePrealloc makes Preallocate take the space it reserves, as a
	// real disk does: all of it, or none and ENOSPC.
	chargePrealloc bool

	mu struct {
		sync.Mutex
		quota  int64
		used   int64
		sizes  map[string]int64
		enospc int // writes refused
	}
}

func newQuotaFS(inner vfs.FS, quota int64) *quotaFS {
	fs := &quotaFS{FS: inner}
	fs.mu.quota = quota
	fs.mu.sizes = map[string]int64{}
	return fs
}

// setQuota changes the disk size.
func (fs *quotaFS) setQuota(q int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.quota = q
}

// usage returns the bytes in use and the ENOSPC errors returned so far.
func (fs *quotaFS) usage() (used int64, enospc int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.mu.used, fs.mu.enospc
}

// reserve charges the growth of name from writing n bytes at off and
// returns how many of them fit.
func (fs *quotaFS) reserve(name string, off int64, n int) int {
	if fs.exempt != nil && fs.exempt(name) {
		return n
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	size := fs.mu.sizes[name]
	end := off + int64(n)
	if end <= size {
		return n
	}
	fits := n
	if free := fs.mu.quota - fs.mu.used; end-size > free {
		fits = int(max(size+max(free, 0)-off, 0))
		end = off + int64(fits)
		fs.mu.enospc++
	}
	if end > size {
		fs.mu.used += end - size
		fs.mu.sizes[name] = end
	}
	return fits
}

// reserveAll charges the growth of name to end if all of it fits.
func (fs *quotaFS) reserveAll(name string, end int64) bool {
	if fs.exempt != nil && fs.exempt(name) {
		return true
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	size := fs.mu.sizes[name]
	if end <= size {
		return true
	}
	if end-size > fs.mu.quota-fs.mu.used {
		fs.mu.enospc++
		return false
	}
	fs.mu.used += end - size
	fs.mu.sizes[name] = end
	return true
}

func (fs *quotaFS) forget(name string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.used -= fs.mu.sizes[name]
	delete(fs.mu.sizes, name)
}

func (fs *quotaFS) move(from, to string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.used -= fs.mu.sizes[to]
	fs.mu.sizes[to] = fs.mu.sizes[from]
	delete(fs.mu.sizes, from)
}

func errNoSpace(op, name string) error {
	return &os.PathError{Op: op, Path: name, Err: fmt.Errorf("quota exceeded: %w", syscall.ENOSPC)}
}

func (fs *quotaFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	fs.forget(name) // Create truncates
	return &quotaFile{File: f, fs: fs, name: name}, nil
}

func (fs *quotaFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	if err != nil {
		return nil, err
	}
	return &quotaFile{File: f, fs: fs, name: name}, nil
}

func (fs *quotaFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err != nil {
		return nil, err
	}
	fs.move(oldname, newname)
	return &quotaFile{File: f, fs: fs, name: newname}, nil
}

func (fs *quotaFS) Remove(name string) error {
	if err := fs.FS.Remove(name); err != nil {
		return err
	}
	fs.forget(name)
	return nil
}

func (fs *quotaFS) RemoveAll(dir string) error {
	err := fs.FS.RemoveAll(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for name, size := range fs.mu.sizes {
		if name == dir || strings.HasPrefix(name, dir+"/") {
			fs.mu.used -= size
			delete(fs.mu.sizes, name)
		}
	}
	return err
}

func (fs *quotaFS) Rename(oldname, newname string) error {
	if err := fs.FS.Rename(oldname, newname); err != nil {
		return err
	}
	fs.move(oldname, newname)
	return nil
}

func (fs *quotaFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	avail := uint64(max(fs.mu.quota-fs.mu.used, 0))
	return vfs.DiskUsage{AvailBytes: avail, TotalBytes: uint64(fs.mu.quota), UsedBytes: uint64(fs.mu.used)}, nil
}

func (fs *quotaFS) Unwrap() vfs.FS { return fs.FS }

type quotaFile struct {
	vfs.File
	fs   *quotaFS
	name string
	off  int64
}

func (f *quotaFile) Write(p []byte) (int, error) {
	fits := f.fs.reserve(f.name, f.off, len(p))
	n, err := f.File.Write(p[:fits])
	f.off += int64(n)
	if err == nil && fits < len(p) {
		err = errNoSpace("write", f.name)
	}
	return n, err
}

func (f *quotaFile) WriteAt(p []byte, off int64) (int, error) {
	fits := f.fs.reserve(f.name, off, len(p))
	n, err := f.File.WriteAt(p[:fits], off)
	if err == nil && fits < len(p) {
		err = errNoSpace("write", f.name)
	}
	return n, err
}

func (f *quotaFile) Preallocate(off, length int64) error {
	if f.fs.chargePrealloc && !f.fs.reserveAll(f.name, off+length) {
		return errNoSpace("fallocate", f.name)
	}
	return f.File.Preallocate(off, length)
}
