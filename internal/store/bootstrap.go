package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The receiving end of a snapshot (a replica's bootstrap; internal/repl
// drives it over the network) writes only through the store's filesystem
// (Options.FS), like everything else of the store:
//
//	OpenBootstrap   the partial download in StagingDir, if any, its
//	                completed files checked again (size and CRC-32C)
//	Begin           the manifest: resume, or start over; the free-space
//	                reserve checked
//	Receive         one file's body, from a resume offset, its CRC-32C
//	                checked against the source's; synced in the background
//	Finish          every file synced and recorded
//	MakeReady       the record removed, StagingDir renamed to ReadyDir
//	                (the commit point), the parent directory synced
//	Replace         the ready snapshot swapped in (snapshot.go)
//
// The record of the download (BootstrapRecord in StagingDir) lists the
// files and how many are complete, checked and synced, and how much of the
// file in progress is synced (its CRC-32C so far); it is replaced
// atomically (temporary file, sync, directory sync, rename, directory
// sync). Nothing counts as received until it is synced and recorded: a
// resumed download checks every completed file again and goes on from the
// recorded prefix of the file in progress, whatever else a crash left on
// disk. A crash at
// any step leaves the old database in service, and either a partial
// download to resume or a ready snapshot the next Open installs.

// BootstrapRecord is the name of the download's record in StagingDir.
const BootstrapRecord = "QS-BOOTSTRAP.json"

// ErrSnapshotCRC: a received snapshot file's CRC-32C is not the source's.
var ErrSnapshotCRC = errors.New("qs: snapshot file CRC mismatch")

// bootstrapState is the record's content; its JSON names are the format
// on disk.
type bootstrapState struct {
	DBID     string         `json:"db_id"`
	Source   string         `json:"source"`
	Snapshot string         `json:"snapshot"`
	Index    uint64         `json:"index"`
	Files    []snapshotFile `json:"files"`
	Done     int            `json:"done"` // files complete, checked and synced
	// Partial is the synced prefix of the file in progress, if one was
	// recorded.
	Partial *partialFile `json:"partial,omitempty"`
}

// partialFile is a synced prefix of a file being received: a resumed
// download goes on from Offset once the file's first Offset bytes on disk
// have the CRC-32C recorded.
type partialFile struct {
	File   int    `json:"file"`
	Offset uint64 `json:"offset"`
	CRC    uint32 `json:"crc"`
}

type snapshotFile struct {
	Name string `json:"name"`
	Size uint64 `json:"size"`
	// CRC is the file's CRC-32C, recorded once received and checked;
	// a resumed download checks the file on disk against it.
	CRC *uint32 `json:"crc,omitempty"`
}

// SnapshotFile is a file of a snapshot's manifest.
type SnapshotFile struct {
	Name string
	Size uint64
}

// SnapshotManifest describes the snapshot a source sends.
type SnapshotManifest struct {
	Source   string // where it comes from (for the record and messages)
	Snapshot string // its id
	Index    uint64 // its applied index
	Files    []SnapshotFile
}

// BootstrapResume is where a download goes on from.
type BootstrapResume struct {
	Snapshot string // the partial download's snapshot id ("" if none)
	File     int    // the first file not complete
	Offset   uint64 // bytes of File already on disk
	OnDisk   uint64 // bytes of the snapshot already on disk
}

// BootstrapHooks report what a download does, for the caller's metrics
// and progress; any may be nil.
type BootstrapHooks struct {
	// Damaged: a file recorded complete fails its check and is received
	// again.
	Damaged func(file string, err error)
	// Synced: the first done files are complete, synced and recorded.
	Synced func(done int)
}

// partialSyncBytes: every this many bytes of a file received, the file
// is synced and its prefix recorded, so that a crash loses at most this
// much of the file in progress.
const partialSyncBytes = 64 << 20

// Bootstrap is one session receiving a snapshot into StagingDir. Its
// methods are called from one goroutine.
type Bootstrap struct {
	s       *Store
	fs      vfs.FS
	staging string
	hooks   BootstrapHooks
	// mu guards state once the syncer runs (it records completed files
	// while Receive records the prefix of the file in progress) and
	// serializes the record's saves.
	mu           sync.Mutex
	state        *bootstrapState
	partialEvery uint64 // partialSyncBytes; smaller in tests
	resume       BootstrapResume
	man          SnapshotManifest
	left         uint64 // bytes of the snapshot not on disk yet
	sy           *syncer
	next         int // the file Receive takes next (files go in order)
}

// OpenBootstrap starts a bootstrap session: it loads the record of an
// earlier download and checks the files it completed (the download goes on
// from the first that fails), or removes a staging directory without a
// usable record.
func (s *Store) OpenBootstrap(h BootstrapHooks) *Bootstrap {
	b := &Bootstrap{s: s, fs: s.opts.FS, staging: StagingDir(s.opts.Dir), hooks: h, partialEvery: partialSyncBytes}
	b.state = b.load()
	if st := b.state; st != nil {
		b.verifyDone()
		b.resume = BootstrapResume{Snapshot: st.Snapshot, File: st.Done}
		for _, f := range st.Files[:st.Done] {
			b.resume.OnDisk += f.Size
		}
		b.resume.Offset = b.verifyPartial()
		b.resume.OnDisk += b.resume.Offset
	}
	return b
}

// verifyPartial returns where the file in progress (the first not
// complete) goes on from: the prefix the record says was synced, if the
// file on disk still begins with it (its size and CRC-32C), else 0. What
// lies beyond that prefix was never synced and is received again; a
// recorded prefix that fails its check is reported as damaged.
func (b *Bootstrap) verifyPartial() uint64 {
	st := b.state
	p := st.Partial
	if st.Done >= len(st.Files) || p == nil || p.File != st.Done {
		return 0
	}
	sf := st.Files[st.Done]
	if p.Offset == 0 || p.Offset > sf.Size {
		return 0
	}
	path := b.fs.PathJoin(b.staging, sf.Name)
	err := func() error {
		f, err := b.fs.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if size := uint64(fi.Size()); size < p.Offset || size > sf.Size {
			return fmt.Errorf("%d bytes on disk, %d synced of %d", size, p.Offset, sf.Size)
		}
		crc, err := crcPrefix(f, p.Offset)
		if err != nil {
			return err
		}
		if crc != p.CRC {
			return fmt.Errorf("CRC %08x of the first %d bytes on disk, %08x received", crc, p.Offset, p.CRC)
		}
		return nil
	}()
	if err != nil {
		b.s.opts.Logger.Warn("partial bootstrap: the synced part of the file in progress fails its check; receiving it again", "file", sf.Name, "err", err)
		if b.hooks.Damaged != nil {
			b.hooks.Damaged(sf.Name, err)
		}
		return 0
	}
	return p.Offset
}

// Resume is where the download goes on from: what to ask the source for.
// Snapshot is "" when there is no partial download.
func (b *Bootstrap) Resume() BootstrapResume { return b.resume }

// load reads the record of an earlier download, or removes a staging
// directory that has none usable.
func (b *Bootstrap) load() *bootstrapState {
	log := b.s.opts.Logger
	if data, err := readFile(b.fs, b.fs.PathJoin(b.staging, BootstrapRecord)); err == nil {
		var st bootstrapState
		if json.Unmarshal(data, &st) == nil && st.DBID == b.s.DBID().String() && st.Done >= 0 && st.Done <= len(st.Files) &&
			checkSnapshotFiles(st.Files) == nil {
			return &st
		}
		log.Warn("discarding an unusable partial bootstrap", "dir", b.staging)
	}
	if err := b.fs.RemoveAll(b.staging); err != nil {
		log.Warn("cannot remove a partial bootstrap", "dir", b.staging, "err", err)
	}
	return nil
}

// verifyDone checks the files an earlier session recorded as complete,
// as they are on disk now: each must have its size and the CRC-32C it
// was received with. The download resumes from the first that does not
// (damaged or changed since, or recorded without its CRC).
func (b *Bootstrap) verifyDone() {
	st := b.state
	for i := 0; i < st.Done; i++ {
		sf := st.Files[i]
		path := b.fs.PathJoin(b.staging, sf.Name)
		if err := b.checkReceived(path, sf); err != nil {
			b.s.opts.Logger.Warn("partial bootstrap: a file recorded complete fails its check; receiving it again", "file", sf.Name, "err", err)
			if b.hooks.Damaged != nil {
				b.hooks.Damaged(sf.Name, err)
			}
			st.Done = i
			if err := b.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				b.s.opts.Logger.Warn("cannot remove a damaged partial bootstrap file", "file", path, "err", err)
			}
			return
		}
	}
}

// checkReceived checks the file at path against its record.
func (b *Bootstrap) checkReceived(path string, sf snapshotFile) error {
	if sf.CRC == nil {
		return errors.New("recorded without its CRC")
	}
	f, err := b.fs.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if uint64(fi.Size()) != sf.Size {
		return fmt.Errorf("%d bytes on disk, %d received", fi.Size(), sf.Size)
	}
	crc, err := crcPrefix(f, sf.Size)
	if err != nil {
		return err
	}
	if crc != *sf.CRC {
		return fmt.Errorf("CRC %08x on disk, %08x received", crc, *sf.CRC)
	}
	return nil
}

// CheckSnapshotFiles refuses (an error wrapping ErrInvalid) a manifest
// whose file names could escape the staging directory or overwrite the
// download's record.
func CheckSnapshotFiles(files []SnapshotFile) error {
	fs := make([]snapshotFile, len(files))
	for i, f := range files {
		fs[i] = snapshotFile{Name: f.Name, Size: f.Size}
	}
	return checkSnapshotFiles(fs)
}

// checkSnapshotFiles refuses file names that could escape the staging
// directory or overwrite the download's record.
func checkSnapshotFiles(files []snapshotFile) error {
	seen := map[string]bool{}
	for _, f := range files {
		if f.Name == "" || f.Name == "." || f.Name == ".." || filepath.Base(f.Name) != f.Name ||
			f.Name == BootstrapRecord || f.Name == BootstrapRecord+".tmp" || f.Name == "LOCK" || seen[f.Name] {
			return fmt.Errorf("%w: snapshot file name %q not acceptable", ErrInvalid, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// Begin takes the manifest of the snapshot the source sends. A partial
// download of the same snapshot goes on from Resume; another is discarded.
// It refuses (an error wrapping ErrInvalid) file names that could escape
// the staging directory, and (an error wrapping ErrDiskFull, the store
// reporting itself full) a snapshot whose bytes left to download do not
// fit above the free-space reserve. The room a partial download of another
// snapshot takes counts as free: it is discarded first if the new snapshot
// then fits, and kept if it would not fit even so. It returns where the
// download goes on from.
func (b *Bootstrap) Begin(m SnapshotManifest) (BootstrapResume, error) {
	files := make([]snapshotFile, len(m.Files))
	var total uint64
	for i, f := range m.Files {
		files[i] = snapshotFile{Name: f.Name, Size: f.Size}
		total += f.Size
	}
	if err := checkSnapshotFiles(files); err != nil {
		return BootstrapResume{}, err
	}
	b.man = m
	same := b.state != nil && b.state.Snapshot == m.Snapshot && sameFiles(b.state.Files, files)
	onDisk := uint64(0)
	if same {
		onDisk = b.resume.OnDisk
	}
	// The snapshot must fit above the free-space reserve, or the download
	// fills the disk; checked again as it arrives (another process may
	// take the space meanwhile).
	b.left = total - min(onDisk, total)
	if !same && b.state != nil && b.fitsWithout() {
		// Discarded before the space check: it may hold the room the
		// new snapshot needs, which the check would refuse for ever.
		b.s.opts.Logger.Info("source offers a new snapshot; discarding the partial download", "had", b.state.Snapshot, "new", m.Snapshot)
		if err := b.fs.RemoveAll(b.staging); err != nil {
			return BootstrapResume{}, err
		}
		b.state = nil
	}
	if err := b.checkSpace(); err != nil {
		return BootstrapResume{}, err
	}
	if !same {
		if err := b.start(m, files); err != nil {
			return BootstrapResume{}, err
		}
		b.resume = BootstrapResume{Snapshot: m.Snapshot}
	}
	b.next = b.resume.File
	b.sy = newSyncer(b)
	return b.resume, nil
}

func sameFiles(a, b []snapshotFile) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Size != b[i].Size {
			return false
		}
	}
	return true
}

// checkSpace refuses to go on unless what is left of the snapshot fits
// above the store's free-space reserve.
func (b *Bootstrap) checkSpace() error {
	err := b.s.checkSpaceFor(b.left, fmt.Sprintf("snapshot %s from %s (%d bytes left to download)", b.man.Snapshot, b.man.Source, b.left))
	if err != nil {
		return fmt.Errorf("bootstrap refused: %w", err)
	}
	return nil
}

// fitsWithout reports whether what is left of the snapshot fits above the
// store's free-space reserve once the staging directory (a partial
// download of another snapshot) is removed. A disk whose free space
// cannot be read counts as fitting, as in checkSpace.
func (b *Bootstrap) fitsWithout() bool {
	du, err := b.fs.GetDiskUsage(b.s.opts.Dir)
	if err != nil {
		return true
	}
	var staged uint64
	names, _ := b.fs.List(b.staging)
	for _, n := range names {
		if fi, err := b.fs.Stat(b.fs.PathJoin(b.staging, n)); err == nil && fi.Mode().IsRegular() {
			staged += uint64(fi.Size())
		}
	}
	s := b.s
	reserve := spaceNeeded(s.opts.MinFreeBytes, s.opts.BallastBytes, s.diskFull.Load(), s.segmentRoom.Load())
	return du.AvailBytes+staged >= reserve+b.left
}

// start empties the staging directory for the snapshot and records it.
func (b *Bootstrap) start(m SnapshotManifest, files []snapshotFile) error {
	if err := b.fs.RemoveAll(b.staging); err != nil {
		return err
	}
	if err := b.fs.MkdirAll(b.staging, 0o755); err != nil {
		return err
	}
	if err := syncDir(b.fs, b.fs.PathDir(b.staging)); err != nil {
		return err
	}
	b.state = &bootstrapState{DBID: b.s.DBID().String(), Source: m.Source, Snapshot: m.Snapshot, Index: m.Index, Files: files}
	return b.save()
}

// save replaces the record durably. Once the syncer runs, it is called
// with b.mu held. The staging directory is synced before the rename: the
// names of the files the new record counts (created since the last sync)
// are durable before the record that counts them, which a filesystem
// may otherwise keep without them.
func (b *Bootstrap) save() error {
	data, err := json.Marshal(b.state)
	if err != nil {
		return err
	}
	tmp := b.fs.PathJoin(b.staging, BootstrapRecord+".tmp")
	if err := writeSynced(b.fs, tmp, data); err != nil {
		return err
	}
	if err := syncDir(b.fs, b.staging); err != nil {
		return err
	}
	if err := b.fs.Rename(tmp, b.fs.PathJoin(b.staging, BootstrapRecord)); err != nil {
		return err
	}
	return syncDir(b.fs, b.staging)
}

// FileBody is one file's bytes as they arrive: read until io.EOF, after
// which SourceCRC is the CRC-32C of the whole file the source computed.
type FileBody interface {
	io.Reader
	SourceCRC() uint32
}

// writebackBytes: every this many bytes received, the kernel is asked to
// start writing them out (see startWriteback), and the free space is
// checked again.
const writebackBytes = 4 << 20

// Receive writes file i of the snapshot from offset off (Resume's Offset
// for the file it names, else 0) with body, and checks the whole file's
// CRC-32C against the source's. Files are received in order, from
// Resume's File on. A file that checks is synced in the background and
// recorded complete once synced (Finish waits for that).
// Errors: body's own read errors as they are; ErrSnapshotCRC (the file is
// received again from its start next time); ErrDiskFull (space ran out
// above the reserve, or the disk returned ENOSPC); an I/O error of the
// store's filesystem otherwise.
func (b *Bootstrap) Receive(i int, off uint64, body FileBody) (err error) {
	defer func() { err = noSpace(err) }()
	// The syncer owns state.Done and the CRCs; the file list is fixed.
	if b.sy == nil || i != b.next || i >= len(b.state.Files) {
		return fmt.Errorf("%w: file %d of a snapshot of %d files, %d next", ErrInvalid, i, len(b.state.Files), b.next)
	}
	sf := b.state.Files[i]
	path := b.fs.PathJoin(b.staging, sf.Name)
	var f vfs.File
	if off == 0 {
		f, err = b.fs.Create(path, vfs.WriteCategoryUnspecified)
	} else {
		f, err = b.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && f != nil {
			f.Close()
		}
	}()
	if off > 0 {
		// Resume checked the first off bytes; what follows them (up to
		// the file's size) was never synced and is written over.
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if size := uint64(fi.Size()); size < off || size > sf.Size {
			return fmt.Errorf("%w: resume %s at %d, %d bytes on disk", ErrInvalid, sf.Name, off, size)
		}
	}
	crc, err := crcPrefix(f, off)
	if err != nil {
		return err
	}
	if err := b.checkSpace(); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	flushed := off  // bytes handed to the kernel's writeback
	recorded := off // bytes synced and recorded
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if off+uint64(n) > sf.Size {
				return fmt.Errorf("%w: %s: more than its %d bytes", ErrInvalid, sf.Name, sf.Size)
			}
			crc = crc32.Update(crc, crcTable, buf[:n])
			if _, err := f.WriteAt(buf[:n], int64(off)); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			off += uint64(n)
			b.left -= min(uint64(n), b.left)
			if off-flushed >= writebackBytes {
				startWriteback(f, int64(flushed), int64(off-flushed))
				flushed = off
				if err := b.checkSpace(); err != nil {
					return err
				}
			}
			if off-recorded >= b.partialEvery && off < sf.Size {
				if err := b.recordPartial(f, i, off, crc); err != nil {
					return err
				}
				recorded = off
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// The stream broke: keep what arrived for the next session.
			if off > recorded {
				if err := b.recordPartial(f, i, off, crc); err != nil {
					b.s.opts.Logger.Warn("partial bootstrap: cannot record the part of a file received", "file", sf.Name, "err", err)
				}
			}
			return rerr
		}
	}
	if off != sf.Size {
		return fmt.Errorf("%w: %s: %d of %d bytes", ErrInvalid, sf.Name, off, sf.Size)
	}
	if want := body.SourceCRC(); want != crc {
		// Start this file over next time, from its start.
		f.Close()
		f = nil
		err = fmt.Errorf("%w: %s: CRC %08x, source says %08x", ErrSnapshotCRC, sf.Name, crc, want)
		if recorded > 0 {
			err = errors.Join(err, b.dropPartial(i))
		}
		b.fs.Remove(path)
		return err
	}
	b.sy.add(f, i, crc)
	b.next++
	return nil
}

// recordPartial syncs the first off bytes of file i (open as f, their
// CRC-32C crc) and records them, so that a later session goes on from
// there.
func (b *Bootstrap) recordPartial(f vfs.File, i int, off uint64, crc uint32) error {
	// The files before it first: a resumed download goes on within the
	// first file not complete only.
	if err := b.sy.flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", b.state.Files[i].Name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state.Partial = &partialFile{File: i, Offset: off, CRC: crc}
	return b.save()
}

// dropPartial forgets the recorded prefix of file i.
func (b *Bootstrap) dropPartial(i int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.state.Partial; p == nil || p.File != i {
		return nil
	}
	b.state.Partial = nil
	return b.save()
}

// Finish waits until every received file is synced and recorded, and
// returns the first error of that (one wrapping ErrDiskFull if the disk
// ran out of space).
func (b *Bootstrap) Finish() error {
	if b.sy == nil {
		return nil
	}
	return noSpace(b.sy.wait())
}

// noSpace makes an error of the disk running out of space (ENOSPC: the
// reserve was checked, but another process took the space since) one
// wrapping ErrDiskFull, as the reserve's refusals are.
func noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrDiskFull) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// MakeReady makes a complete download the ready snapshot: the record
// removed, the staging directory synced and renamed to ReadyDir (the
// commit point: from there the next Open installs it) and its parent
// synced. Replace then installs it.
func (b *Bootstrap) MakeReady() error {
	if err := b.Finish(); err != nil {
		return err
	}
	if b.state == nil || b.state.Done != len(b.state.Files) {
		return fmt.Errorf("%w: the snapshot download is not complete", ErrInvalid)
	}
	if err := b.fs.Remove(b.fs.PathJoin(b.staging, BootstrapRecord)); err != nil {
		return err
	}
	if err := syncDir(b.fs, b.staging); err != nil {
		return err
	}
	ready := ReadyDir(b.s.opts.Dir)
	if err := b.fs.RemoveAll(ready); err != nil {
		return err
	}
	if err := b.fs.Rename(b.staging, ready); err != nil {
		return err
	}
	return syncDir(b.fs, b.fs.PathDir(ready))
}

// Install makes the download ready and swaps it in (Replace); ctx only
// bounds the wait for the swap to start: once submitted the install
// happens.
func (b *Bootstrap) Install(ctx context.Context) error {
	if err := b.MakeReady(); err != nil {
		return err
	}
	return b.s.Replace(ctx)
}

// OpenReceived opens a file of the download (named as in its manifest)
// for reading, on the store's filesystem: what was received so far.
func (b *Bootstrap) OpenReceived(name string) (io.ReadCloser, error) {
	if err := CheckSnapshotFiles([]SnapshotFile{{Name: name}}); err != nil {
		return nil, err
	}
	return b.fs.Open(b.fs.PathJoin(b.staging, name))
}

// DropPartialBootstrap removes a partial download (an earlier bootstrap
// cut short) that nothing will resume; it reports whether there was one.
func (s *Store) DropPartialBootstrap() (bool, error) {
	staging := StagingDir(s.opts.Dir)
	if _, err := s.opts.FS.Stat(staging); err != nil {
		return false, nil
	}
	if err := s.opts.FS.RemoveAll(staging); err != nil {
		return true, err
	}
	return true, nil
}
