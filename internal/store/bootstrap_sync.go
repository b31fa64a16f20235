package store

import (
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The background side of a bootstrap's download (bootstrap.go): received
// files synced in order and recorded, and the file helpers of the record.

// syncer fsyncs received files in order and records them as done. The
// record is saved once for all the files synced since the last save (each
// save costs three fsyncs), so a disk slower than the network does not pay
// four fsyncs per file.
type syncer struct {
	b    *Bootstrap
	next chan syncJob
	done chan error
}

type syncJob struct {
	f   vfs.File
	i   int
	crc uint32
	// flushed, on a job without a file, is told (the first error, or
	// nil) once every file queued before it is synced and recorded.
	flushed chan error
}

func newSyncer(b *Bootstrap) *syncer {
	next := make(chan syncJob, 1024)
	s := &syncer{b: b, next: next, done: make(chan error, 1)}
	go func() {
		var err error
		for j := range next {
			last := -1
			var synced []syncJob
			var flushed []chan error
			for ok := true; ok; {
				switch {
				case j.f == nil:
					flushed = append(flushed, j.flushed)
				default:
					if err == nil {
						if err = j.f.Sync(); err == nil {
							last = j.i
							synced = append(synced, j)
						}
					}
					if cerr := j.f.Close(); err == nil {
						err = cerr
					}
				}
				// Take the files queued meanwhile into the same save.
				select {
				case j, ok = <-next:
				default:
					ok = false
				}
			}
			if err == nil && last >= 0 {
				if err = s.record(synced, last+1); err == nil && b.hooks.Synced != nil {
					b.hooks.Synced(last + 1)
				}
			}
			for _, c := range flushed {
				c <- err
			}
		}
		s.done <- err
	}()
	return s
}

// flush waits until every file queued is synced and recorded, and
// returns the first error of the syncer.
func (s *syncer) flush() error {
	c := make(chan error, 1)
	s.next <- syncJob{flushed: c}
	return <-c
}

// record records the files synced (with their CRCs) and that the first
// done files are complete, and saves the record.
func (s *syncer) record(synced []syncJob, done int) error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, j := range synced {
		crc := j.crc
		b.state.Files[j.i].CRC = &crc
	}
	b.state.Done = done
	if p := b.state.Partial; p != nil && p.File < done {
		b.state.Partial = nil // of a file now complete
	}
	return b.save()
}

// add queues f (file i, complete and checked: crc) for syncing.
func (s *syncer) add(f vfs.File, i int, crc uint32) { s.next <- syncJob{f: f, i: i, crc: crc} }

// wait syncs everything queued and returns the first error.
func (s *syncer) wait() error {
	if s.next != nil {
		close(s.next)
		s.next = nil
	}
	err := <-s.done
	s.done <- err
	return err
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// crcPrefix returns the CRC-32C of the first n bytes of f.
func crcPrefix(f io.ReaderAt, n uint64) (uint32, error) {
	h := crc32.New(crcTable)
	if _, err := io.CopyN(h, io.NewSectionReader(f, 0, int64(n)), int64(n)); err != nil {
		return 0, fmt.Errorf("read the first %d bytes: %w", n, err)
	}
	return h.Sum32(), nil
}

// readFile reads the whole file at path.
func readFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeSynced writes data to a new file at path and syncs it.
func writeSynced(fs vfs.FS, path string, data []byte) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
