package store

import (
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// remove deletes the segments doomed says nothing needs, other than the
// one being appended to, once the readers that could still reference
// them are gone.
func (g *segments) remove(doom func(seq uint64) bool, gate *readGate, quit <-chan struct{}) (complete bool, err error) {
	g.mu.Lock()
	var doomed []uint64
	for seq := range *g.files.Load() {
		if doom(seq) && seq != g.curSeq {
			doomed = append(doomed, seq)
		}
	}
	g.mu.Unlock()
	if len(doomed) == 0 {
		return true, nil
	}
	// Without mu: the committer takes it on every commit. New references
	// go only to the open segment, so the doomed stay doomed meanwhile.
	if !gate.quiesce(100*time.Millisecond, quit) {
		return false, nil // a reader is slow; try at the next round
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, seq := range doomed {
		f := (*g.files.Load())[seq]
		if f == nil || seq == g.curSeq {
			continue
		}
		f.Close()
		g.setFile(seq, nil)
		if err := g.retire(g.fs.PathJoin(g.dir, segName(seq))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		g.m.segmentsRemoved.Inc()
	}
	return true, nil
}

// spareName is a file ready to become the next segment. It is not a
// segment: a crash leaves it alone, and if it was renamed into a segment
// whose header was not yet written, that segment holds nothing a replay
// accepts (its frames, if any, are of older entries).
const (
	spareName = "qslog-spare"
	spareTemp = "qslog-spare.tmp"
)

// takeSpare renames the spare, if there is one, to name and opens it for
// writing. Called with mu held.
func (g *segments) takeSpare(name string) (vfs.File, error) {
	if !g.haveSpare {
		return nil, nil
	}
	g.haveSpare = false
	if err := g.fs.Rename(g.fs.PathJoin(g.dir, spareName), name); err != nil {
		return nil, nil // make a new one instead
	}
	f, err := g.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		g.fs.Remove(name)
		return nil, nil
	}
	g.m.segmentsRecycled.Inc()
	return f, nil
}

// retire removes a segment file, or keeps it as the spare if there is none
// and it may be one (recyclable). Called with mu held.
func (g *segments) retire(path string) error {
	if !g.haveSpare && g.recyclable(path) {
		if err := g.fs.Rename(path, g.fs.PathJoin(g.dir, spareName)); err == nil {
			g.haveSpare = true
			return nil
		}
	}
	return g.fs.Remove(path)
}

// recyclable reports whether the segment file at path may become the
// spare: it is no larger than a segment (one made for a larger block, or
// before the segment size shrank, would keep its excess as the next
// segment's), and no checkpoint links it (recycling a file a snapshot
// shares would overwrite the snapshot), which is known only where the
// filesystem says a file's link count.
func (g *segments) recyclable(path string) bool {
	st, err := g.fs.Stat(path)
	if err != nil || st.Size() > g.size {
		return false
	}
	if g.recycleAnyway {
		return true
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && sys.Nlink == 1
}

// spareChunk and spareGap pace the writing of a spare: 256 KiB every
// 1.5 ms, 64 MiB in about 0.4 s (~170 MB/s), a third of what this
// machine's disk takes, so that commits' fsyncs do not queue behind it.
// A segment written faster than that gets a fresh file instead.
const (
	spareChunk = 256 << 10
	spareGap   = 1500 * time.Microsecond
)

// prepareSpare writes a spare of zeros when there is none and a quarter
// of the current segment is used (a store that writes enough to need the
// next one soon), so that the next segment is an overwrite too. Called by
// the segment collector, never with mu held; quit stops it.
func (g *segments) prepareSpare(quit <-chan struct{}) error {
	g.mu.Lock()
	need := !g.haveSpare && g.cur != nil && g.tail-g.start > g.capacity/4
	size := g.nextCapacity()
	g.mu.Unlock()
	if !need {
		return nil
	}
	tmp := g.fs.PathJoin(g.dir, spareTemp)
	f, err := g.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	// Written back as it goes, not in one burst at the end that commits'
	// fsyncs would queue behind.
	f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: 512 << 10})
	zero := make([]byte, spareChunk)
	tick := time.NewTicker(spareGap)
	defer tick.Stop()
	for off := int64(0); off < size && err == nil; off += int64(len(zero)) {
		_, err = f.Write(zero[:min(int64(len(zero)), size-off)])
		select {
		case <-quit:
			err = ErrClosed
		case <-tick.C:
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		g.fs.Remove(tmp)
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.haveSpare {
		return g.fs.Remove(tmp)
	}
	if err := g.fs.Rename(tmp, g.fs.PathJoin(g.dir, spareName)); err != nil {
		g.fs.Remove(tmp)
		return err
	}
	g.haveSpare = true
	g.m.sparesWritten.Inc()
	return nil
}

// fileSize is the size of segment seq's file (what was written in it; its
// preallocated space is not counted), 0 if it is not open.
func (g *segments) fileSize(seq uint64) int64 {
	f := (*g.files.Load())[seq]
	if f == nil {
		return 0
	}
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// diskBytes is the bytes written in the segments (their preallocated
// space beyond is not counted, as fallocate keeps the files' size).
func (g *segments) diskBytes() uint64 {
	var n uint64
	for seq := range *g.files.Load() {
		n += uint64(g.fileSize(seq))
	}
	return n
}

// copyInto puts the segments into a checkpoint in dir: hard links of the
// sealed ones, a copy of the synced part of the open one (below its synced
// end, an open segment is never written again, even if a failure sealed
// it: what follows is abandoned), short of a group still in flight: its
// frames may be synced and its Pebble batch still fail, and the copy,
// which the failure's new segment header never reaches, would replay a
// write answered as failed, whose index the store then gives to another.
// But Pebble's checkpoint, taken just before, copied its write-ahead log
// as it was then, which may hold the batch of the group in flight at that
// moment (committed, not yet marked done): so the group in flight when
// the copy begins is waited for first. If it committed, its block is
// copied; if it failed, fail sealed the segment short of it. A group that
// starts after that is not in Pebble's checkpoint, and is left out.
// The caller keeps segments from being removed meanwhile (Store.collect);
// mu is held only to read the set, not during the copy, which would hold
// up commits.
func (g *segments) copyInto(dir string) error {
	g.mu.Lock()
	if g.pending {
		for n := g.settled; g.settled == n; {
			g.settledCond.Wait()
		}
	}
	files, open, end := *g.files.Load(), g.curSeq, g.synced
	if g.pending {
		end = min(end, g.pendingAt)
	}
	g.mu.Unlock()
	for seq := range files {
		from, to := g.fs.PathJoin(g.dir, segName(seq)), g.fs.PathJoin(dir, segName(seq))
		var err error
		if seq != open {
			err = g.fs.Link(from, to)
		} else {
			err = vfs.LimitedCopy(g.fs, from, to, end)
		}
		if err != nil {
			return err
		}
	}
	return syncDir(g.fs, dir)
}
