package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Snapshots are how a replica that is new, or too far behind its source's
// retained log, gets the whole database at once (internal/repl streams
// them). A snapshot is a Pebble checkpoint: the immutable table and blob
// files hard-linked, the write-ahead log copied. Making one takes
// milliseconds, and once made it pins nothing in the live database: the
// files are read like any others, with no read transaction held open.
//
// On the receiving side (bootstrap.go) a snapshot is downloaded into
// StagingDir(dir), synced, renamed to ReadyDir(dir) (the commit point)
// and installed by Replace, or by the next Open after a crash. Installing
// renames dir to dir+".old", ReadyDir to dir, and removes the old
// directory once the new database has opened.

// StagingDir is where a snapshot of the database in dir is downloaded.
func StagingDir(dir string) string { return dir + ".bootstrap" }

// ReadyDir holds a complete, synced snapshot waiting to replace dir.
func ReadyDir(dir string) string { return dir + ".ready" }

// CheckpointsDir holds the checkpoints made of the database in dir for
// bootstrapping replicas (internal/repl), one directory each. They
// hard-link the store's files and pin their disk, so the process that
// makes them removes them; what one that was killed left there, Open
// removes.
func CheckpointsDir(dir string) string { return dir + ".snapshots" }

func oldDir(dir string) string    { return dir + ".old" }
func failedDir(dir string) string { return dir + ".failed" }

// Checkpoint writes a consistent copy of the database into dir, which must
// not exist and must be on the same filesystem as the store (for hard
// links), and returns the head of the copy.
func (s *Store) Checkpoint(dir string) (Head, error) {
	if s.closed.Load() {
		return Head{}, ErrClosed
	}
	s.engine.RLock()
	s.collect.Lock()
	err := s.db.Checkpoint(dir, pebble.WithFlushedWAL())
	if err == nil && s.segs != nil {
		// After Pebble's: the segments hold every block it references.
		err = s.segs.copyInto(dir)
	}
	s.collect.Unlock()
	s.engine.RUnlock()
	if err != nil {
		s.opts.FS.RemoveAll(dir)
		return Head{}, fmt.Errorf("checkpoint %s: %w", s.opts.Name, err)
	}
	s.m.checkpoints.Inc()
	id, h, err := ReadHead(Options{Name: s.opts.Name, Dir: dir, FS: s.opts.FS, Logger: s.opts.Logger})
	if err == nil && id != s.dbid {
		err = fmt.Errorf("%w: checkpoint has %s", ErrDBIDMismatch, id)
	}
	if err != nil {
		s.opts.FS.RemoveAll(dir)
		return Head{}, err
	}
	return h, nil
}

// ReadHead opens the database in o.Dir read-only and returns its id and
// head.
func ReadHead(o Options) (DBID, Head, error) {
	o.ReadOnly = true
	st, err := Open(o)
	if err != nil {
		return DBID{}, Head{}, err
	}
	defer st.Close()
	h, err := st.Head()
	return st.DBID(), h, err
}

// Replace installs the snapshot in ReadyDir(o.Dir) in place of the live
// database, which must be a replica: the snapshot must be of the same
// database and not older than the applied index, so readers never see the
// index go back. Readers wait for the swap (tens of milliseconds) rather
// than fail; views open on the old database are waited for. On failure
// the old database stays in service and the ready snapshot is removed.
func (s *Store) Replace(ctx context.Context) error {
	r := &request{kind: reqReplace, done: make(chan struct{})}
	return s.submit(ctx, r)
}

// replace runs on the committer goroutine, with no group in flight.
func (s *Store) replace() error {
	o := s.opts
	ready := ReadyDir(o.Dir)
	id, h, err := ReadHead(Options{Name: o.Name, Dir: ready, FS: o.FS, Logger: o.Logger})
	switch {
	case err != nil:
		err = fmt.Errorf("snapshot in %s: %w", ready, err)
	case id != s.dbid:
		err = fmt.Errorf("%w: snapshot of %s, store is %s", ErrDBIDMismatch, id, s.dbid)
	case h.Index < s.applied.Load():
		err = fmt.Errorf("%w: snapshot at index %d is older than applied index %d", ErrInvalid, h.Index, s.applied.Load())
	}
	if err != nil {
		o.FS.RemoveAll(ready)
		return err
	}
	start := time.Now()
	s.engine.Lock()
	defer s.engine.Unlock()
	if err := s.db.Close(); err != nil {
		o.Logger.Warn("closing the replaced database", "db", o.Name, "err", err)
	}
	if s.segs != nil {
		if err := s.segs.close(); err != nil {
			o.Logger.Warn("closing the replaced log segments", "db", o.Name, "err", err)
		}
		s.segs = nil
	}
	if err := installReady(o); err != nil {
		// Nothing was renamed, or the rename was undone: reopen the old.
		return errors.Join(fmt.Errorf("install snapshot: %w", err), s.reopen())
	}
	if err := s.reopen(); err != nil {
		// The snapshot does not open: put the old database back.
		o.Logger.Error("installed snapshot does not open; restoring the previous database", "db", o.Name, "err", err)
		rerr := errors.Join(o.FS.RemoveAll(failedDir(o.Dir)), o.FS.Rename(o.Dir, failedDir(o.Dir)),
			o.FS.Rename(oldDir(o.Dir), o.Dir), syncDir(o.FS, o.FS.PathDir(o.Dir)))
		return errors.Join(err, rerr, s.reopen())
	}
	removeReplaced(o)
	s.m.snapshotsInstalled.Inc()
	o.Logger.Info("installed snapshot", "db", o.Name, "index", h.Index, "pause", time.Since(start))
	return nil
}

// reopen opens the engine in o.Dir after a swap and reloads the metadata.
// Called with s.engine held exclusively.
func (s *Store) reopen() error {
	db, err := s.openEngine(s.opts.Dir)
	if err != nil {
		return err
	}
	s.db = db
	if err := s.loadMeta(); err != nil {
		db.Close()
		return err
	}
	if err := s.openSegments(); err != nil {
		db.Close()
		return err
	}
	s.ensureBallast()
	a, err := s.readApplied()
	if err != nil {
		return err
	}
	s.cache.reset(a.index)
	s.publish(a)
	return nil
}

// installReady moves a ready snapshot into place, and finishes an install
// a crash interrupted. The rename of the ready directory to o.Dir is the
// commit point.
func installReady(o Options) error {
	fs := o.FS
	dir, ready, old := o.Dir, ReadyDir(o.Dir), oldDir(o.Dir)
	if exists(fs, ready) {
		if exists(fs, dir) {
			if err := fs.RemoveAll(old); err != nil {
				return err
			}
			if err := fs.Rename(dir, old); err != nil {
				return err
			}
		}
		if err := fs.Rename(ready, dir); err != nil {
			if exists(fs, old) && !exists(fs, dir) {
				fs.Rename(old, dir)
			}
			return err
		}
		return syncDir(fs, fs.PathDir(dir))
	}
	if !exists(fs, dir) && exists(fs, old) {
		// A crash during a restore of the old database.
		if err := fs.Rename(old, dir); err != nil {
			return err
		}
		return syncDir(fs, fs.PathDir(dir))
	}
	return nil
}

// removeCheckpoints removes the checkpoints an earlier process made for
// bootstrapping; called by Open once the engine's lock is held, before
// this process makes any.
func removeCheckpoints(o Options) {
	d := CheckpointsDir(o.Dir)
	if !exists(o.FS, d) {
		return
	}
	if err := o.FS.RemoveAll(d); err != nil {
		o.Logger.Warn("cannot remove the checkpoints of an earlier run", "dir", d, "err", err)
		return
	}
	o.Logger.Info("removed the checkpoints of an earlier run", "db", o.Name, "dir", d)
}

// removeReplaced removes what an install left behind, once the installed
// database has opened.
func removeReplaced(o Options) {
	for _, d := range []string{oldDir(o.Dir), failedDir(o.Dir)} {
		if exists(o.FS, d) {
			if err := o.FS.RemoveAll(d); err != nil {
				o.Logger.Warn("cannot remove a replaced database", "dir", d, "err", err)
			}
		}
	}
}

func exists(fs vfs.FS, path string) bool {
	_, err := fs.Stat(path)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}

// syncDir makes the entries of dir durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
