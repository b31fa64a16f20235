package repl

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// A replica bootstraps when its source refuses it with log_truncated (it is
// behind the retained log), or when it is new (applied index 0) and the
// source is more than BootstrapMinEntries ahead. It downloads a snapshot
// into store.StagingDir, file by file, keeping a record of the completed
// files there; a broken connection or a restart resumes from the last byte
// on disk of the file in progress. Each file's CRC-32C is checked against
// the source's before it is kept, and recorded: a resumed download checks
// the files it completed against it first. Complete, the directory is synced,
// renamed to store.ReadyDir and swapped in by store.Replace; the replica
// then streams the log from the snapshot's index on. With the cluster's
// public key, the files are first checked against the root's seal
// (seal.go, checkSeal): nothing the root did not seal is installed.

// errNeedBootstrap: a new replica is far behind; a snapshot is cheaper
// than replaying the log.
var errNeedBootstrap = errors.New("qs: new replica far behind its source: bootstrapping from a snapshot")

// stateFile is the download's record in the staging directory.
const stateFile = "QS-BOOTSTRAP.json"

type bootstrapState struct {
	DBID     string         `json:"db_id"`
	Source   string         `json:"source"`
	Snapshot string         `json:"snapshot"`
	Index    uint64         `json:"index"`
	Files    []snapshotFile `json:"files"`
	Done     int            `json:"done"` // files complete, checked and synced
}

type snapshotFile struct {
	Name string `json:"name"`
	Size uint64 `json:"size"`
	// CRC is the file's CRC-32C, recorded once received and checked;
	// a resumed download checks the file on disk against it.
	CRC *uint32 `json:"crc,omitempty"`
}

// BootstrapProgress describes the current (or last) bootstrap.
type BootstrapProgress struct {
	Active     bool      // downloading or installing now
	Waiting    bool      // waiting for the host's bootstrap lock
	Source     string    // where the snapshot comes from
	Snapshot   string    // the snapshot's id
	Index      uint64    // the snapshot's applied index
	BytesDone  uint64    // bytes of the snapshot on disk
	BytesTotal uint64    // bytes of the snapshot
	FilesDone  int       // files complete
	FilesTotal int       // files of the snapshot
	Resumed    uint64    // bytes already on disk when the last session started
	Started    time.Time // start of the current (or last) session
	Finished   time.Time // when the last snapshot was installed
}

func (r *Replica) progress(fn func(p *BootstrapProgress)) {
	r.update(func(s *ReplicaState) { fn(&s.Bootstrap) })
}

// bootstrap runs one bootstrap session with src. progressed reports
// whether it received or installed anything.
func (r *Replica) bootstrap(ctx context.Context, src string, minIndex uint64) (progressed bool, err error) {
	db := r.cfg.Database
	mBootstrapping.WithLabelValues(db).Set(1)
	defer mBootstrapping.WithLabelValues(db).Set(0)
	r.update(func(s *ReplicaState) { s.Status = StatusBootstrapping })
	r.progress(func(p *BootstrapProgress) {
		*p = BootstrapProgress{Active: true, Waiting: true, Source: src, Started: time.Now(), Finished: p.Finished}
	})
	defer r.progress(func(p *BootstrapProgress) { p.Active, p.Waiting = false, false })
	unlock, err := hostLock(ctx, r.cfg.BootstrapLock)
	if err != nil {
		return false, fmt.Errorf("bootstrap lock %s: %w", r.cfg.BootstrapLock, err)
	}
	defer unlock()
	r.progress(func(p *BootstrapProgress) { p.Waiting = false })

	d := &download{r: r, src: src, staging: store.StagingDir(r.st.Options().Dir), minIndex: minIndex}
	progressed, err = d.run(ctx)
	var se *streamError
	switch {
	case err == nil:
		mBootstraps.WithLabelValues(db, "installed").Inc()
	case errors.As(err, &se) && se.kind == kindSeal:
		mBootstraps.WithLabelValues(db, "seal_refused").Inc()
	case progressed:
		mBootstraps.WithLabelValues(db, "interrupted").Inc()
	default:
		mBootstraps.WithLabelValues(db, "failed").Inc()
	}
	return progressed, err
}

// download is one bootstrap session's state.
type download struct {
	r       *Replica
	src     string
	staging string
	state   *bootstrapState
	fr      frameReader // for the chunks: one buffer reused
	// minIndex: the snapshot must be at least at this index (0: at
	// least at the store's applied index).
	minIndex uint64
	// left is the snapshot's bytes not on disk yet.
	left uint64
}

// checkSpace refuses to go on with the download unless what is left of
// the snapshot fits above the store's free-space reserve (min_free_bytes):
// an error wrapping store.ErrDiskFull (counted as errors_total
// kind="disk_full"), and the store reports itself full (the disk_full
// gauge).
func (d *download) checkSpace(snap *Snapshot) error {
	err := d.r.st.CheckSpaceFor(d.left, fmt.Sprintf("snapshot %s from %s (%d bytes left to download)", snap.ID, d.src, d.left))
	if err != nil {
		return &streamError{kindDiskFull, fmt.Errorf("bootstrap refused: %w", err)}
	}
	return nil
}

func (d *download) run(ctx context.Context) (progressed bool, err error) {
	r := d.r
	d.state = d.load()
	resume := ResumePoint{}
	var onDisk uint64
	if s := d.state; s != nil {
		d.verifyDone()
		id, _ := hex.DecodeString(s.Snapshot)
		copy(resume.Snapshot[:], id)
		resume.File = uint32(s.Done)
		for _, f := range s.Files[:s.Done] {
			onDisk += f.Size
		}
		if s.Done < len(s.Files) {
			if fi, err := os.Stat(filepath.Join(d.staging, s.Files[s.Done].Name)); err == nil {
				resume.Offset = min(uint64(fi.Size()), s.Files[s.Done].Size)
				onDisk += resume.Offset
			}
		}
	}

	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	c, err := r.cfg.Dial(dctx, "tcp", d.src)
	cancel()
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", d.src, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(r.cfg.HandshakeTimeout))
	version := streamVersion
	if r.cfg.Verifier != nil {
		version = SealVersion // install only what the root sealed
	}
	hello := &Hello{Version: version, Database: r.cfg.Database, DBID: r.st.DBID(), ProcessID: r.cfg.ProcessID,
		LastIndex: max(r.st.AppliedIndex(), d.minIndex), Bootstrap: true, Resume: resume}
	if err := WriteMessage(c, hello); err != nil {
		return false, fmt.Errorf("send hello to %s: %w", d.src, err)
	}
	br := bufio.NewReaderSize(c, 1<<20)
	// The source makes the snapshot before answering: allow for that.
	c.SetReadDeadline(time.Now().Add(r.cfg.HandshakeTimeout + r.cfg.IdleTimeout))
	m, err := ReadMessage(br)
	if err != nil {
		return false, fmt.Errorf("bootstrap handshake with %s: %w", d.src, err)
	}
	var w *Welcome
	switch m := m.(type) {
	case *Refuse:
		return false, &RefusedError{Code: m.Code, Reason: m.Reason}
	case *Welcome:
		w = m
	default:
		return false, fmt.Errorf("%w: %s answered a bootstrap hello with %s", ErrMalformed, d.src, m.Type())
	}
	if w.DBID != r.st.DBID() {
		return false, &RefusedError{Code: RefuseWrongDBID, Reason: fmt.Sprintf("source %s serves database id %s, we have %s", d.src, w.DBID, r.st.DBID())}
	}
	if w.ProcessID == r.cfg.ProcessID {
		return false, &RefusedError{Code: RefuseSelf, Reason: fmt.Sprintf("source %s is this process", d.src)}
	}
	c.SetWriteDeadline(time.Time{})
	c.SetReadDeadline(time.Now().Add(r.cfg.IdleTimeout))
	if m, err = ReadMessage(br); err != nil {
		return false, fmt.Errorf("bootstrap manifest from %s: %w", d.src, err)
	}
	snap, ok := m.(*Snapshot)
	if !ok {
		return false, fmt.Errorf("%w: expected the snapshot manifest from %s, got %s", ErrMalformed, d.src, m.Type())
	}
	if err := checkManifest(snap); err != nil {
		return false, err
	}
	if snap.Index < r.st.AppliedIndex() {
		return false, fmt.Errorf("%w: snapshot at index %d is behind our applied index %d", ErrMalformed, snap.Index, r.st.AppliedIndex())
	}
	var total uint64
	for _, f := range snap.Files {
		total += f.Size
	}
	if d.state == nil || snap.ID != resume.Snapshot {
		onDisk = 0 // a new snapshot: the partial download is discarded
	}
	// The snapshot must fit above the free-space reserve, or the download
	// fills the disk; checked again as it arrives (another process may
	// take the space meanwhile).
	d.left = total - min(onDisk, total)
	if err := d.checkSpace(snap); err != nil {
		return false, err
	}
	if d.state == nil || snap.ID != resume.Snapshot {
		if d.state != nil {
			r.log.Info("source offers a new snapshot; discarding the partial download", "had", d.state.Snapshot, "new", snap.ID.String())
		}
		if err := d.start(snap); err != nil {
			return false, err
		}
		resume, onDisk = ResumePoint{Snapshot: snap.ID}, 0
	}
	if onDisk > 0 {
		mBootstrapResumedBytes.WithLabelValues(r.cfg.Database).Add(float64(onDisk))
	}
	r.progress(func(p *BootstrapProgress) {
		p.Snapshot, p.Index, p.BytesTotal, p.FilesTotal = snap.ID.String(), snap.Index, total, len(snap.Files)
		p.BytesDone, p.FilesDone, p.Resumed = onDisk, d.state.Done, onDisk
	})
	r.log.Info("bootstrapping", "source", d.src, "snapshot", snap.ID.String(), "index", snap.Index,
		"bytes", total, "files", len(snap.Files), "resume_file", resume.File, "resume_offset", resume.Offset)

	// Files are fsynced in the background, in order, while the next ones
	// arrive; the record counts a file done only once it is synced.
	sy := newSyncer(d)
	// With the public key, each complete file is hashed for the seal in
	// the background while the next ones arrive.
	var sums *sealHasher
	if r.cfg.Verifier != nil {
		sums = newSealHasher(d.staging, snap.Files)
		defer sums.stop()
		for i := range d.state.Done {
			sums.add(i)
		}
	}
	for i := d.state.Done; i < len(snap.Files); i++ {
		off := uint64(0)
		if i == int(resume.File) {
			off = resume.Offset
		}
		f, crc, got, err := d.receiveFile(ctx, c, br, snap, i, off)
		progressed = progressed || got
		if err != nil {
			return progressed, errors.Join(err, sy.wait())
		}
		sy.add(f, i, crc)
		if sums != nil {
			sums.add(i)
		}
	}
	if err := sy.wait(); err != nil {
		return progressed, err
	}
	c.SetReadDeadline(time.Now().Add(r.cfg.IdleTimeout))
	if m, err = ReadMessage(br); err != nil {
		return progressed, fmt.Errorf("bootstrap end from %s: %w", d.src, err)
	}
	seal, sealed := m.(*Seal)
	if sealed {
		c.SetReadDeadline(time.Now().Add(r.cfg.IdleTimeout))
		if m, err = ReadMessage(br); err != nil {
			return progressed, fmt.Errorf("bootstrap end from %s: %w", d.src, err)
		}
	}
	if done, ok := m.(*Done); !ok || done.LastIndex != snap.Index {
		return progressed, fmt.Errorf("%w: expected done at %d, got %s", ErrMalformed, snap.Index, m.Type())
	}
	c.Close()
	if err := d.checkSeal(snap, seal, sums); err != nil {
		return false, err // the download is discarded: nothing progressed
	}
	return true, d.install(ctx, snap)
}

// checkSeal verifies, when the replica has the cluster's public key, that
// the received snapshot is the root's before it is installed: the root
// sealed the snapshot's head and the digest of the files as they were
// read back from disk (sums, seal.go). A snapshot without a seal, or whose seal does not
// verify, is removed (every file is received again, from the next
// source), logged and counted (bootstraps_total{result="seal_refused"},
// errors_total{kind="snapshot_seal"}).
func (d *download) checkSeal(snap *Snapshot, seal *Seal, sums *sealHasher) error {
	r := d.r
	if r.cfg.Verifier == nil {
		return nil
	}
	err := d.verifySeal(snap, seal, sums)
	if err == nil {
		r.log.Info("snapshot sealed by the root", "source", d.src, "snapshot", snap.ID.String(), "index", snap.Index)
		return nil
	}
	r.log.Error("refusing a snapshot that is not the root's; discarding it", "source", d.src,
		"snapshot", snap.ID.String(), "index", snap.Index, "err", err)
	if rerr := os.RemoveAll(d.staging); rerr != nil {
		r.log.Warn("cannot remove a refused snapshot", "dir", d.staging, "err", rerr)
	}
	return &streamError{kindSeal, err}
}

func (d *download) verifySeal(snap *Snapshot, seal *Seal, hasher *sealHasher) error {
	if seal == nil {
		return fmt.Errorf("qs: source %s sent snapshot %s without the root's seal", d.src, snap.ID)
	}
	sums, err := hasher.wait()
	if err != nil {
		return err
	}
	if err := d.r.cfg.Verifier.VerifySeal(d.r.st.DBID(), snap.Index, snap.Hash, filesDigest(snap.Files, sums), seal.Sig); err != nil {
		return fmt.Errorf("snapshot %s from %s at index %d: %w", snap.ID, d.src, snap.Index, err)
	}
	return nil
}

// checkManifest refuses file names that could escape the staging
// directory or overwrite the download's record.
func checkManifest(s *Snapshot) error {
	seen := map[string]bool{}
	for _, f := range s.Files {
		if f.Name == "" || f.Name == "." || f.Name == ".." || filepath.Base(f.Name) != f.Name ||
			f.Name == stateFile || f.Name == "LOCK" || seen[f.Name] {
			return fmt.Errorf("%w: snapshot file name %q not acceptable", ErrMalformed, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// load reads the record of an earlier download, or removes a staging
// directory that has none usable.
func (d *download) load() *bootstrapState {
	b, err := os.ReadFile(filepath.Join(d.staging, stateFile))
	if err == nil {
		var s bootstrapState
		if json.Unmarshal(b, &s) == nil && s.DBID == d.r.st.DBID().String() && s.Done >= 0 && s.Done <= len(s.Files) {
			return &s
		}
		d.r.log.Warn("discarding an unusable partial bootstrap", "dir", d.staging)
	}
	if err := os.RemoveAll(d.staging); err != nil {
		d.r.log.Warn("cannot remove a partial bootstrap", "dir", d.staging, "err", err)
	}
	return nil
}

// verifyDone checks the files an earlier session recorded as complete,
// as they are on disk now: each must have its size and the CRC-32C it
// was received with. The download resumes from the first that does not
// (damaged or changed since, or recorded without its CRC), which is
// received again, counted as errors_total kind="crc".
func (d *download) verifyDone() {
	s := d.state
	for i := 0; i < s.Done; i++ {
		sf := s.Files[i]
		path := filepath.Join(d.staging, sf.Name)
		if err := checkReceived(path, sf); err != nil {
			d.r.log.Warn("partial bootstrap: a file recorded complete fails its check; receiving it again", "file", sf.Name, "err", err)
			mErrors.WithLabelValues(d.r.cfg.Database, kindCRC).Inc()
			s.Done = i
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				d.r.log.Warn("cannot remove a damaged partial bootstrap file", "file", path, "err", err)
			}
			return
		}
	}
}

// checkReceived checks the file at path against its record.
func checkReceived(path string, sf snapshotFile) error {
	if sf.CRC == nil {
		return errors.New("recorded without its CRC")
	}
	f, err := os.Open(path)
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

// start empties the staging directory for snap and records it.
func (d *download) start(snap *Snapshot) error {
	if err := os.RemoveAll(d.staging); err != nil {
		return err
	}
	if err := os.MkdirAll(d.staging, 0o755); err != nil {
		return err
	}
	s := &bootstrapState{DBID: d.r.st.DBID().String(), Source: d.src, Snapshot: snap.ID.String(), Index: snap.Index}
	for _, f := range snap.Files {
		s.Files = append(s.Files, snapshotFile{Name: f.Name, Size: f.Size})
	}
	d.state = s
	return d.save()
}

// save replaces the record durably.
func (d *download) save() error {
	b, err := json.Marshal(d.state)
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.staging, stateFile+".tmp")
	if err := writeSynced(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(d.staging, stateFile)); err != nil {
		return err
	}
	return syncPath(d.staging)
}

// syncer fsyncs received files in order and records them as done. The
// record is saved once for all the files synced since the last save (each
// save costs two fsyncs), so a disk slower than the network does not pay
// three fsyncs per file.
type syncer struct {
	d    *download
	next chan syncJob
	done chan error
}

type syncJob struct {
	f   *os.File
	i   int
	crc uint32
}

func newSyncer(d *download) *syncer {
	next := make(chan syncJob, 1024)
	s := &syncer{d: d, next: next, done: make(chan error, 1)}
	go func() {
		var err error
		for j := range next {
			last := -1
			for ok := true; ok; {
				if err == nil {
					if err = j.f.Sync(); err == nil {
						last = j.i
						crc := j.crc
						s.d.state.Files[j.i].CRC = &crc
					}
				}
				if cerr := j.f.Close(); err == nil {
					err = cerr
				}
				// Take the files queued meanwhile into the same save.
				select {
				case j, ok = <-next:
				default:
					ok = false
				}
			}
			if err != nil || last < 0 {
				continue // drain, closing the rest
			}
			s.d.state.Done = last + 1
			if err = s.d.save(); err == nil {
				s.d.r.progress(func(p *BootstrapProgress) { p.FilesDone = last + 1 })
			}
		}
		s.done <- err
	}()
	return s
}

// add queues f (file i, complete and checked: crc) for syncing.
func (s *syncer) add(f *os.File, i int, crc uint32) { s.next <- syncJob{f, i, crc} }

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

// writebackBytes: every this many bytes received, the kernel is asked to
// start writing them out (see startWriteback).
const writebackBytes = 4 << 20

// receiveFile receives file i from offset off on and returns it, open,
// once its size and CRC (returned) checked. got reports whether any byte
// arrived.
func (d *download) receiveFile(ctx context.Context, c interface{ SetReadDeadline(time.Time) error }, br *bufio.Reader, snap *Snapshot, i int, off uint64) (_ *os.File, _ uint32, got bool, err error) {
	r := d.r
	sf := d.state.Files[i]
	path := filepath.Join(d.staging, sf.Name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, false, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := f.Truncate(int64(off)); err != nil {
		return nil, 0, false, err
	}
	crc, err := crcPrefix(f, off)
	if err != nil {
		return nil, 0, false, err
	}
	db := r.cfg.Database
	if err := d.checkSpace(snap); err != nil {
		return nil, 0, false, err
	}
	flushed := off // bytes handed to the kernel's writeback
	for {
		c.SetReadDeadline(time.Now().Add(r.cfg.IdleTimeout))
		m, err := d.fr.message(br)
		if err != nil {
			return nil, 0, got, fmt.Errorf("bootstrap from %s: %w", d.src, err)
		}
		switch m := m.(type) {
		case *Chunk:
			if int(m.File) != i || m.Offset != off || off+uint64(len(m.Data)) > sf.Size {
				return nil, 0, got, fmt.Errorf("%w: chunk of file %d at %d (+%d), expected file %d at %d of %d", ErrMalformed, m.File, m.Offset, len(m.Data), i, off, sf.Size)
			}
			if _, err := f.Write(m.Data); err != nil {
				return nil, 0, got, &streamError{kindApply, fmt.Errorf("write %s: %w", path, err)}
			}
			crc = crc32.Update(crc, crcTable, m.Data)
			off += uint64(len(m.Data))
			d.left -= min(uint64(len(m.Data)), d.left)
			if off-flushed >= writebackBytes {
				startWriteback(f, int64(flushed), int64(off-flushed))
				flushed = off
				if err := d.checkSpace(snap); err != nil {
					return nil, 0, true, err
				}
			}
			got = got || len(m.Data) > 0
			mBootstrapBytes.WithLabelValues(db).Add(float64(len(m.Data)))
			r.progress(func(p *BootstrapProgress) { p.BytesDone += uint64(len(m.Data)) })
		case *FileEnd:
			if int(m.File) != i || m.Size != sf.Size || off != sf.Size {
				return nil, 0, got, fmt.Errorf("%w: end of file %d (%d bytes) after %d of %d bytes of file %d", ErrMalformed, m.File, m.Size, off, sf.Size, i)
			}
			if m.CRC != crc {
				// Start this file over next time.
				f.Truncate(0)
				return nil, 0, got, &streamError{kindCRC, fmt.Errorf("qs: snapshot file %s: CRC %08x, source says %08x", sf.Name, crc, m.CRC)}
			}
			return f, crc, got, nil
		case *Refuse:
			return nil, 0, got, &RefusedError{Code: m.Code, Reason: m.Reason}
		default:
			return nil, 0, got, fmt.Errorf("%w: unexpected %s during bootstrap from %s", ErrMalformed, m.Type(), d.src)
		}
		if ctx.Err() != nil {
			return nil, 0, got, ctx.Err()
		}
	}
}

// install makes the download ready and swaps it in.
func (d *download) install(ctx context.Context, snap *Snapshot) error {
	r := d.r
	if err := os.Remove(filepath.Join(d.staging, stateFile)); err != nil {
		return err
	}
	if err := syncPath(d.staging); err != nil {
		return err
	}
	ready := store.ReadyDir(r.st.Options().Dir)
	if err := os.RemoveAll(ready); err != nil {
		return err
	}
	if err := os.Rename(d.staging, ready); err != nil {
		return err
	}
	if err := syncPath(filepath.Dir(ready)); err != nil {
		return err
	}
	t0 := time.Now()
	// Not cancellable: once submitted the install happens, and a shutdown
	// racing it must not report an installed snapshot as failed.
	r.book.Reset() // heads of the replaced log no longer describe the store
	r.dropHead()
	if err := r.st.Replace(context.WithoutCancel(ctx)); err != nil {
		return &streamError{kindApply, fmt.Errorf("install snapshot %s: %w", snap.ID, err)}
	}
	r.progress(func(p *BootstrapProgress) { p.Finished = time.Now() })
	r.log.Info("bootstrap installed", "snapshot", snap.ID.String(), "index", snap.Index, "install", time.Since(t0))
	r.export()
	return nil
}

// dropPartialBootstrap removes a partial download (an earlier bootstrap,
// cut short by a crash), now that the log streams: nothing would resume
// it, and it may hold most of a database.
func (r *Replica) dropPartialBootstrap() {
	staging := store.StagingDir(r.st.Options().Dir)
	if _, err := os.Stat(staging); err != nil {
		return
	}
	if err := os.RemoveAll(staging); err != nil {
		r.log.Warn("cannot remove a partial bootstrap", "dir", staging, "err", err)
		return
	}
	r.log.Info("removed a partial bootstrap: the log streams", "dir", staging)
}

// Bootstrap runs one bootstrap session with src outside of Run: it
// downloads a snapshot whose index is at least minIndex (resuming a
// download interrupted before) and installs it. A replicated root's member
// uses it to catch up with a Raft snapshot (internal/raftroot).
func (r *Replica) Bootstrap(ctx context.Context, src string, minIndex uint64) error {
	_, err := r.bootstrap(ctx, src, minIndex)
	return err
}

// hostLock takes the host's bootstrap lock (one bootstrap per host at a
// time, across processes), waiting for it until ctx ends.
func hostLock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncPath fsyncs a directory, making the names in it durable.
func syncPath(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
