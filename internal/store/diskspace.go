package store

import (
	"errors"
	"fmt"
	"syscall"
)

// checkSpace refuses writes while free space is below the reserve, and
// leaves disk-full mode once the reserve and the ballast fit again.
func (c *committer) checkSpace() error {
	s := c.s
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return nil // cannot tell; let the write try
	}
	need := s.opts.MinFreeBytes
	if s.diskFull.Load() && s.opts.BallastBytes > 0 {
		need += uint64(s.opts.BallastBytes)
	}
	if du.AvailBytes < need {
		if !s.diskFull.Swap(true) {
			s.opts.Logger.Error("disk full: refusing writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes, "reserve_bytes", need)
		}
		s.m.diskFull.Set(1)
		return fmt.Errorf("%w: %d bytes free, %d reserved", ErrDiskFull, du.AvailBytes, need)
	}
	if s.diskFull.Swap(false) {
		s.opts.Logger.Info("disk space back: accepting writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes)
		s.ensureBallast()
	}
	s.m.diskFull.Set(0)
	return nil
}

func classifyCommitError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	return fmt.Errorf("%w: %v", ErrWriteFailed, err)
}
