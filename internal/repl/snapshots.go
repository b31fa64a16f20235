package repl

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
)

// snapshotCache holds the checkpoints a server made to bootstrap replicas.
// A checkpoint lives in store.CheckpointsDir/<id>, on the store's
// filesystem so its files are hard links. It is shared by every replica
// that bootstraps while it is fresh (younger than keep, and the log still
// continues from its index), kept for keep after its last use so an
// interrupted download can resume, and removed once unused after that or
// once superseded.
type snapshotCache struct {
	keep time.Duration
	m    *Metrics
	log  *slog.Logger

	mu     sync.Mutex
	newest map[string]*snapshot // by database
	all    map[SnapshotID]*snapshot
}

type snapshot struct {
	id       SnapshotID
	db       string
	dir      string
	head     store.Head
	files    []SnapshotFile
	size     uint64
	made     time.Time
	lastUsed time.Time
	users    int

	// sums are the SHA-256s of the files a seal covers (seal.go): taken
	// as a file is sent whole, else read when a seal needs them.
	sumMu sync.Mutex
	sums  []*fileSum
}

// setSum records the SHA-256 of file i, sent whole.
func (s *snapshot) setSum(i int, sum fileSum) {
	s.sumMu.Lock()
	defer s.sumMu.Unlock()
	if s.sums == nil {
		s.sums = make([]*fileSum, len(s.files))
	}
	s.sums[i] = &sum
}

// open opens one of the snapshot's files.
func (s *snapshot) open(name string) (io.ReadCloser, error) {
	return os.Open(filepath.Join(s.dir, name))
}

// digest is the digest of the snapshot's files a seal signs; the files
// not yet summed (sent in part, or by an earlier session) are read.
func (s *snapshot) digest() (headsig.Digest, error) {
	s.sumMu.Lock()
	defer s.sumMu.Unlock()
	if s.sums == nil {
		s.sums = make([]*fileSum, len(s.files))
	}
	all := make([]fileSum, len(s.files))
	for i, f := range s.files {
		if s.sums[i] == nil {
			sum, err := sumFile(s.open, f.Name, f.Size)
			if err != nil {
				return headsig.Digest{}, err
			}
			s.sums[i] = &sum
		}
		all[i] = *s.sums[i]
	}
	return filesDigest(s.files, all), nil
}

func newSnapshotCache(keep time.Duration, m *Metrics, log *slog.Logger) *snapshotCache {
	return &snapshotCache{keep: keep, m: m, log: log, newest: map[string]*snapshot{},
		all: map[SnapshotID]*snapshot{}}
}

// acquire returns the snapshot to resume, or a fresh one of st, and holds
// it until release. The newest snapshot is shared only if its index is at
// least minIndex (the client's applied index: an older snapshot is of no
// use to it).
func (c *snapshotCache) acquire(st *store.Store, resume SnapshotID, minIndex uint64) (*snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.all[resume]; ok && !resume.IsZero() && s.db == st.Name() {
		s.users++
		return s, nil
	}
	lr, err := st.LogRange()
	if err != nil {
		return nil, err
	}
	if s := c.newest[st.Name()]; s != nil && time.Since(s.made) < c.keep && s.head.Index+1 >= lr.First && s.head.Index >= minIndex {
		s.users++
		return s, nil
	}
	// Those an earlier run left there, store.Open removed.
	parent := store.CheckpointsDir(st.Options().Dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	var id SnapshotID
	rand.Read(id[:])
	s := &snapshot{id: id, db: st.Name(), dir: filepath.Join(parent, id.String()), made: time.Now(), users: 1}
	t0 := time.Now()
	if s.head, err = st.Checkpoint(s.dir); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	for _, e := range ents {
		// LOCK is Pebble's, made when the store read the checkpoint's head.
		if e.Name() == "LOCK" {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			os.RemoveAll(s.dir)
			return nil, fmt.Errorf("snapshot file %s: not a regular file (%v)", e.Name(), err)
		}
		s.files = append(s.files, SnapshotFile{Name: e.Name(), Size: uint64(fi.Size())})
		s.size += uint64(fi.Size())
	}
	c.log.Info("made a snapshot for bootstrapping", "db", s.db, "snapshot", id.String(), "index", s.head.Index,
		"files", len(s.files), "bytes", s.size, "took", time.Since(t0))
	if old := c.newest[s.db]; old != nil {
		old.lastUsed = time.Time{} // superseded: remove once unused
	}
	c.newest[s.db] = s
	c.all[id] = s
	c.gcLocked()
	return s, nil
}

func (c *snapshotCache) release(s *snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.users--
	s.lastUsed = time.Now()
	if c.newest[s.db] != s {
		s.lastUsed = time.Time{}
	}
	c.gcLocked()
}

// gc removes the snapshots nobody uses or may resume any more.
func (c *snapshotCache) gc() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gcLocked()
}

func (c *snapshotCache) gcLocked() {
	for id, s := range c.all {
		if s.users > 0 || time.Since(s.lastUsed) < c.keep {
			continue
		}
		if err := os.RemoveAll(s.dir); err != nil {
			c.log.Warn("cannot remove a snapshot", "dir", s.dir, "err", err)
			continue
		}
		delete(c.all, id)
		if c.newest[s.db] == s {
			delete(c.newest, s.db)
		}
	}
	c.m.snapshotsHeld.Set(float64(len(c.all)))
}

// removeAll removes every snapshot; the server is stopping.
func (c *snapshotCache) removeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, s := range c.all {
		os.RemoveAll(s.dir)
		delete(c.all, id)
		delete(c.newest, s.db)
	}
	c.m.snapshotsHeld.Set(0)
}
