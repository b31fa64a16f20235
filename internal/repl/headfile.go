package repl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"time"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
)

// The last signed head a replica verified is kept in a small file beside
// its store (<store dir>.head), so that after a restart it forwards
// entries to its own replicas at once, with that head, instead of waiting
// for its source's next head. The file is a cache, not state: it is
// written without fsync at most once per headSaveEvery and when the
// replica stops, checked on load (format, checksum, database id,
// signature), and a file that fails a check is ignored, counted
// (errors_total{kind="head_file"}) and replaced by the next head. A head
// is a fact about the root's log whatever this store holds, so an older
// head than the store's applied index is still right to forward.
//
//	file := "QSH1" db_id(16) index(8 BE) hash(32) signature(64) crc32c(4 BE, of what precedes)
const (
	headFileMagic = "QSH1"
	headFileLen   = len(headFileMagic) + len(store.DBID{}) + headLen + 4
	// headSaveEvery bounds how often the head file is written.
	headSaveEvery = time.Second
	// kindHeadFile counts head files that did not load.
	kindHeadFile = "head_file"
)

var headCRC = crc32.MakeTable(crc32.Castagnoli)

func encodeHeadFile(db store.DBID, h headsig.Head) []byte {
	b := append([]byte(headFileMagic), db[:]...)
	b = (&Head{h}).AppendPayload(b)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, headCRC))
}

// decodeHeadFile parses a head file of database db; it does not check the
// signature.
func decodeHeadFile(b []byte, db store.DBID) (headsig.Head, error) {
	if len(b) != headFileLen || !bytes.HasPrefix(b, []byte(headFileMagic)) {
		return headsig.Head{}, fmt.Errorf("head file of %d bytes, not a head file", len(b))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, headCRC) != binary.BigEndian.Uint32(b[len(body):]) {
		return headsig.Head{}, errors.New("head file fails its checksum")
	}
	var got store.DBID
	copy(got[:], body[len(headFileMagic):])
	if got != db {
		return headsig.Head{}, fmt.Errorf("head file of database %s, not %s", got, db)
	}
	m, err := decodeHead(body[len(headFileMagic)+len(db):])
	if err != nil {
		return headsig.Head{}, err
	}
	return m.Head, nil
}

// headPath is the replica's head file.
func (r *Replica) headPath() string { return r.st.Options().Dir + ".head" }

// loadHead puts the saved head, if it verifies, in the book.
func (r *Replica) loadHead() {
	if r.cfg.Verifier == nil {
		return
	}
	b, err := os.ReadFile(r.headPath())
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil {
		var h headsig.Head
		if h, err = decodeHeadFile(b, r.st.DBID()); err == nil {
			if err = r.cfg.Verifier.Verify(r.st.DBID(), h); err == nil {
				r.book.Add(h)
				r.saved = h.Index
				r.update(func(s *ReplicaState) { s.SignedIndex = max(s.SignedIndex, h.Index) })
				return
			}
		}
	}
	r.cfg.Metrics.errors.WithLabelValues(r.cfg.Database, kindHeadFile).Inc()
	r.log.Warn("saved signed head ignored; the replica forwards entries once its source sends a head", "file", r.headPath(), "err", err)
}

// saveHead writes the book's newest head, if newer than the one saved,
// and at most once per headSaveEvery unless now is set.
func (r *Replica) saveHead(now bool) {
	if r.cfg.Verifier == nil {
		return
	}
	h, ok := r.book.Latest()
	if !ok || h.Index <= r.saved || (!now && time.Since(r.savedAt) < headSaveEvery) {
		return
	}
	r.savedAt = time.Now()
	path := r.headPath()
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, encodeHeadFile(r.st.DBID(), h), 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		r.log.Warn("signed head not saved; after a restart the replica waits for its source's next head", "file", path, "err", err)
		return
	}
	r.saved = h.Index
}

// dropHead forgets the saved head (the store's log was replaced).
func (r *Replica) dropHead() {
	r.saved = 0
	if err := os.Remove(r.headPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("saved signed head not removed", "file", r.headPath(), "err", err)
	}
}
