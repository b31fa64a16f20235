package store

import (
	"errors"
	"fmt"
	"syscall"
)

// spaceNeeded is the free space writes need: the reserve, and while the
// store refuses writes for lack of space, room for the ballast too (so
// that it can be made again before writes resume) and for the log segment
// whose preallocation failed (segmentRoom, 0 if none did).
func spaceNeeded(minFree uint64, ballast int64, diskFull bool, segmentRoom uint64) uint64 {
	need := minFree
	if diskFull {
		if ballast > 0 {
			need += uint64(ballast)
		}
		need += segmentRoom
	}
	return need
}

// enterDiskFull puts the store in disk-full mode after a commit failed
// with ENOSPC although free space was above the reserve (checkCommitSpace): a
// reserve smaller than a log segment's preallocation, or another process
// that took the space. The disk_full gauge says so, and writes are
// refused until free space is back above the reserve, the ballast and,
// if a new log segment failed (segmentFull), the space it takes: writes
// would otherwise go on failing one by one with the gauge at 0.
func (s *Store) enterDiskFull(err error, segmentFull bool) {
	if segmentFull && s.segs != nil {
		s.segmentRoom.Store(uint64(s.segs.rotationBytes()))
	}
	if !s.diskFull.Swap(true) {
		s.opts.Logger.Error("disk full: refusing writes", "db", s.opts.Name, "err", err, "segment_bytes", s.segmentRoom.Load())
	}
	s.m.diskFull.Set(1)
}

// checkCommitSpace refuses writes while free space is below the reserve,
// and leaves disk-full mode once the reserve and the ballast fit again.
// Only the committer calls it, before each group.
func (s *Store) checkCommitSpace() error {
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return nil // cannot tell; let the write try
	}
	need := spaceNeeded(s.opts.MinFreeBytes, s.opts.BallastBytes, s.diskFull.Load(), s.segmentRoom.Load())
	if du.AvailBytes < need {
		if !s.diskFull.Swap(true) {
			s.opts.Logger.Error("disk full: refusing writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes, "reserve_bytes", need)
		}
		s.m.diskFull.Set(1)
		return fmt.Errorf("%w: %d bytes free, %d reserved", ErrDiskFull, du.AvailBytes, need)
	}
	s.segmentRoom.Store(0)
	if s.diskFull.Swap(false) {
		s.opts.Logger.Info("disk space back: accepting writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes)
		s.ensureBallast()
	}
	s.m.diskFull.Set(0)
	return nil
}

// CheckSpace reports, without writing anything, whether a write would be
// refused now for lack of disk space: an error wrapping ErrDiskFull if
// free space is below the reserve (or the store already refuses writes
// and the reserve and ballast do not fit yet); the store then counts the
// refusal and reports itself full (DiskFull, the disk_full gauge).
// A replicated root's member asks before it proposes a write its own
// store could not apply. A disk whose free space cannot be read is not
// reported full (the write tries).
func (s *Store) CheckSpace() error {
	if err := s.checkSpaceFor(0, ""); err != nil {
		s.m.writeErrors.WithLabelValues(errorKind(err)).Inc()
		return err
	}
	return nil
}

// CheckSpaceFor is CheckSpace for bytes more about to be written into the
// database's directory (a snapshot being downloaded, what is left of
// it): they must fit above the reserve. what names them in the error.
func (s *Store) CheckSpaceFor(bytes uint64, what string) error {
	return s.checkSpaceFor(bytes, what)
}

func (s *Store) checkSpaceFor(bytes uint64, what string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return nil
	}
	reserve := spaceNeeded(s.opts.MinFreeBytes, s.opts.BallastBytes, s.diskFull.Load(), s.segmentRoom.Load())
	if du.AvailBytes >= reserve && du.AvailBytes-reserve >= bytes {
		return nil
	}
	// Entering disk-full mode is safe from any goroutine; only the
	// committer leaves it (it makes the ballast again first).
	if !s.diskFull.Swap(true) {
		s.opts.Logger.Error("disk full: refusing writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes, "reserve_bytes", reserve, "more_bytes", bytes)
	}
	s.m.diskFull.Set(1)
	if bytes > 0 {
		return fmt.Errorf("%w: %s needs %d bytes above the %d reserved; %d bytes free", ErrDiskFull, what, bytes, reserve, du.AvailBytes)
	}
	return fmt.Errorf("%w: %d bytes free, %d reserved", ErrDiskFull, du.AvailBytes, reserve)
}

func classifyCommitError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	return fmt.Errorf("%w: %v", ErrWriteFailed, err)
}
