package repl

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// A replica bootstraps when its source refuses it with log_truncated (it is
// behind the retained log), or when it is new (applied index 0) and the
// source is more than BootstrapMinEntries ahead. The download speaks the
// protocol here and hands each file's body to the store (store.Bootstrap),
// which writes it on its own filesystem into store.StagingDir, keeping a
// record of the completed files there; a broken connection or a restart
// resumes from the synced and recorded prefix of the file in progress.
// Each file's CRC-32C is checked against the source's before it is kept,
// and recorded: a resumed download checks the files it completed (and the
// prefix) against it first, and receives again any that fails.
// Complete, the store makes it ready (store.ReadyDir, the commit point) and
// swaps it in (store.Replace); the replica then streams the log from the
// snapshot's index on. With the cluster's public key, the files are
// first checked against the root's seal (seal.go, checkSeal): nothing the
// root did not seal is installed.

// errNeedBootstrap: a new replica is far behind; a snapshot is cheaper
// than replaying the log.
var errNeedBootstrap = errors.New("qs: new replica far behind its source: bootstrapping from a snapshot")

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
	db, ms := r.cfg.Database, r.cfg.Metrics
	ms.bootstrapping.WithLabelValues(db).Set(1)
	defer ms.bootstrapping.WithLabelValues(db).Set(0)
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

	d := &download{r: r, src: src, minIndex: minIndex}
	progressed, err = d.run(ctx)
	var se *streamError
	switch {
	case err == nil:
		ms.bootstraps.WithLabelValues(db, "installed").Inc()
	case errors.As(err, &se) && se.kind == kindSeal:
		ms.bootstraps.WithLabelValues(db, "seal_refused").Inc()
	case progressed:
		ms.bootstraps.WithLabelValues(db, "interrupted").Inc()
	default:
		ms.bootstraps.WithLabelValues(db, "failed").Inc()
	}
	return progressed, err
}

// download is one bootstrap session's state.
type download struct {
	r   *Replica
	src string
	b   *store.Bootstrap
	fr  frameReader // for the chunks: one buffer reused
	// minIndex: the snapshot must be at least at this index (0: at
	// least at the store's applied index).
	minIndex uint64
}

func (d *download) run(ctx context.Context) (progressed bool, err error) {
	r := d.r
	db := r.cfg.Database
	d.b = r.st.OpenBootstrap(store.BootstrapHooks{
		Damaged: func(string, error) { r.cfg.Metrics.errors.WithLabelValues(db, kindCRC).Inc() },
		Synced:  func(done int) { r.progress(func(p *BootstrapProgress) { p.FilesDone = done }) },
	})
	defer d.b.Finish()
	had := d.b.Resume()
	resume := ResumePoint{}
	if had.Snapshot != "" {
		id, _ := hex.DecodeString(had.Snapshot)
		copy(resume.Snapshot[:], id)
		resume.File, resume.Offset = uint32(had.File), had.Offset
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
	man := store.SnapshotManifest{Source: d.src, Snapshot: snap.ID.String(), Index: snap.Index}
	var total uint64
	for _, f := range snap.Files {
		man.Files = append(man.Files, store.SnapshotFile{Name: f.Name, Size: f.Size})
		total += f.Size
	}
	if err := store.CheckSnapshotFiles(man.Files); err != nil {
		return false, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if snap.Index < r.st.AppliedIndex() {
		return false, fmt.Errorf("%w: snapshot at index %d is behind our applied index %d", ErrMalformed, snap.Index, r.st.AppliedIndex())
	}
	at, err := d.b.Begin(man)
	if err != nil {
		if errors.Is(err, store.ErrDiskFull) {
			err = &streamError{kindDiskFull, err}
		}
		return false, err
	}
	if at.Snapshot != had.Snapshot || at.File != had.File || at.Offset != had.Offset {
		// A new snapshot: the partial download is discarded.
		resume = ResumePoint{Snapshot: snap.ID}
	}
	if at.OnDisk > 0 {
		r.cfg.Metrics.bootstrapResumedBytes.WithLabelValues(db).Add(float64(at.OnDisk))
	}
	r.progress(func(p *BootstrapProgress) {
		p.Snapshot, p.Index, p.BytesTotal, p.FilesTotal = snap.ID.String(), snap.Index, total, len(snap.Files)
		p.BytesDone, p.FilesDone, p.Resumed = at.OnDisk, at.File, at.OnDisk
	})
	r.log.Info("bootstrapping", "source", d.src, "snapshot", snap.ID.String(), "index", snap.Index,
		"bytes", total, "files", len(snap.Files), "resume_file", resume.File, "resume_offset", resume.Offset)

	// The store syncs files in the background, in order, while the next
	// ones arrive; its record counts a file done only once it is synced.
	// With the public key, each complete file is hashed for the seal in
	// the background too.
	var sums *sealHasher
	if r.cfg.Verifier != nil {
		sums = newSealHasher(d.b.OpenReceived, snap.Files)
		defer sums.stop()
		for i := range at.File {
			sums.add(i)
		}
	}
	for i := at.File; i < len(snap.Files); i++ {
		off := uint64(0)
		if i == int(resume.File) {
			off = resume.Offset
		}
		body := &fileBody{ctx: ctx, d: d, c: c, br: br, file: i, off: off, size: snap.Files[i].Size}
		err := d.b.Receive(i, off, body)
		progressed = progressed || body.got
		if err != nil {
			return progressed, errors.Join(receiveError(body, err), d.b.Finish())
		}
		if sums != nil {
			sums.add(i)
		}
	}
	if err := d.b.Finish(); err != nil {
		return progressed, receiveError(nil, err)
	}
	c.SetReadDeadline(time.Now().Add(r.cfg.IdleTimeout))
	if m, err = ReadMessage(br); err != nil {
		return progressed, fmt.Errorf("bootstrap end from %s: %w", d.src, err)
	}
	seal, sealed := m.(*Seal)
	if sealed && r.cfg.Verifier == nil {
		// A seal comes only when asked (SealVersion): a source that
		// sends one unasked does not speak the protocol.
		return progressed, fmt.Errorf("%w: %s sent a seal this bootstrap did not ask for", ErrMalformed, d.src)
	}
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
	if _, rerr := r.st.DropPartialBootstrap(); rerr != nil {
		r.log.Warn("cannot remove a refused snapshot", "err", rerr)
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

// receiveError classifies an error of receiving a file (body) or of
// syncing the files received (body nil): the stream's own errors as they
// are, the store's by their kind.
func receiveError(body *fileBody, err error) error {
	switch {
	case body != nil && body.err != nil && errors.Is(err, body.err):
		return err
	case errors.Is(err, store.ErrDiskFull):
		return &streamError{kindDiskFull, err}
	case errors.Is(err, store.ErrSnapshotCRC):
		return &streamError{kindCRC, fmt.Errorf("qs: snapshot: %w", err)}
	case errors.Is(err, store.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &streamError{kindApply, err}
}

// fileBody reads one file's chunks off the stream for the store: the
// data of each chunk in order, io.EOF at its FileEnd (whose CRC is then
// SourceCRC).
type fileBody struct {
	ctx       context.Context
	d         *download
	c         interface{ SetReadDeadline(time.Time) error }
	br        *bufio.Reader
	file      int
	off, size uint64
	rest      []byte // of the current chunk, not read yet
	crc       uint32
	ended     bool
	got       bool  // whether any byte arrived
	err       error // the stream's error, returned by Read
}

func (fb *fileBody) SourceCRC() uint32 { return fb.crc }

func (fb *fileBody) Read(p []byte) (int, error) {
	for len(fb.rest) == 0 {
		if fb.ended {
			return 0, io.EOF
		}
		if err := fb.next(); err != nil {
			fb.err = err
			return 0, err
		}
	}
	n := copy(p, fb.rest)
	fb.rest = fb.rest[n:]
	return n, nil
}

// next reads the next message of the file.
func (fb *fileBody) next() error {
	d, r := fb.d, fb.d.r
	if err := fb.ctx.Err(); err != nil {
		return err
	}
	fb.c.SetReadDeadline(time.Now().Add(r.cfg.IdleTimeout))
	m, err := d.fr.message(fb.br)
	if err != nil {
		return fmt.Errorf("bootstrap from %s: %w", d.src, err)
	}
	switch m := m.(type) {
	case *Chunk:
		if int(m.File) != fb.file || m.Offset != fb.off || fb.off+uint64(len(m.Data)) > fb.size {
			return fmt.Errorf("%w: chunk of file %d at %d (+%d), expected file %d at %d of %d", ErrMalformed, m.File, m.Offset, len(m.Data), fb.file, fb.off, fb.size)
		}
		fb.rest = m.Data
		fb.off += uint64(len(m.Data))
		fb.got = fb.got || len(m.Data) > 0
		r.cfg.Metrics.bootstrapBytes.WithLabelValues(r.cfg.Database).Add(float64(len(m.Data)))
		r.progress(func(p *BootstrapProgress) { p.BytesDone += uint64(len(m.Data)) })
	case *FileEnd:
		if int(m.File) != fb.file || m.Size != fb.size || fb.off != fb.size {
			return fmt.Errorf("%w: end of file %d (%d bytes) after %d of %d bytes of file %d", ErrMalformed, m.File, m.Size, fb.off, fb.size, fb.file)
		}
		fb.crc, fb.ended = m.CRC, true
	case *Refuse:
		return &RefusedError{Code: m.Code, Reason: m.Reason}
	default:
		return fmt.Errorf("%w: unexpected %s during bootstrap from %s", ErrMalformed, m.Type(), d.src)
	}
	return nil
}

// install makes the download ready and swaps it in.
func (d *download) install(ctx context.Context, snap *Snapshot) error {
	r := d.r
	if err := d.b.MakeReady(); err != nil {
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
	removed, err := r.st.DropPartialBootstrap()
	if err != nil {
		r.log.Warn("cannot remove a partial bootstrap", "dir", staging, "err", err)
		return
	}
	if removed {
		r.log.Info("removed a partial bootstrap: the log streams", "dir", staging)
	}
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
