package repl

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
)

// sealedSnapshot is a snapshot as a bootstrap client receives it.
type sealedSnapshot struct {
	manifest *Snapshot
	files    [][]byte
	seal     *Seal
}

// fetchSealed bootstraps from the server at addr as a client with the
// public key would, and returns what it received.
func fetchSealed(t *testing.T, addr string, st *store.Store) sealedSnapshot {
	t.Helper()
	c, m := rawSession(t, addr, &Hello{Version: SealVersion, Database: st.Name(), DBID: st.DBID(), ProcessID: NewProcessID(), Bootstrap: true})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("bootstrap answered %s", m.Type())
	}
	var s sealedSnapshot
	for {
		m, err := ReadMessage(c)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *Snapshot:
			s.manifest = m
			s.files = make([][]byte, len(m.Files))
		case *Chunk:
			s.files[m.File] = append(s.files[m.File], m.Data...)
		case *FileEnd:
		case *Seal:
			s.seal = m
		case *Done:
			return s
		default:
			t.Fatalf("unexpected %s", m.Type())
		}
	}
}

// forgeValue rewrites the snapshot as a source without the signing key
// could: the inline record of key gets value forged (of the same length)
// with a correct record checksum, so the store opens and verifies clean;
// the snapshot's head, index and chain hash stay the root's.
func forgeValue(t *testing.T, s sealedSnapshot, key, forged string) sealedSnapshot {
	t.Helper()
	dir := t.TempDir()
	for i, f := range s.manifest.Files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), s.files[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	dk := append([]byte{'d'}, key...)
	rec, closer, err := db.Get(dk)
	if err != nil {
		t.Fatal(err)
	}
	rec = bytes.Clone(rec)
	closer.Close()
	const header = 4 + 1 + 8 // crc, flags, index
	if len(rec) != header+len(forged) || rec[4] != 0 {
		t.Fatalf("record of %q: %d bytes, flags %#x: not an inline value of %d bytes", key, len(rec), rec[4], len(forged))
	}
	copy(rec[header:], forged)
	binary.BigEndian.PutUint32(rec, crc32.Checksum(rec[4:], crcTable))
	if err := db.Set(dk, rec, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out := sealedSnapshot{manifest: &Snapshot{ID: SnapshotID{7}, Index: s.manifest.Index, Time: s.manifest.Time, Hash: s.manifest.Hash}, seal: s.seal}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out.manifest.Files = append(out.manifest.Files, SnapshotFile{Name: e.Name(), Size: uint64(len(b))})
		out.files = append(out.files, b)
	}
	return out
}

// forgingSource serves s to every bootstrap (with the root's seal it
// relays, to a bootstrap that asks for it) and refuses every stream with
// log_truncated, so a new replica bootstraps from it.
func forgingSource(t *testing.T, id store.DBID, s sealedSnapshot) string {
	return snapshotServer(t, id, s, func(h *Hello) bool { return h.Version >= SealVersion })
}

// snapshotServer is forgingSource sending s's seal to the bootstraps
// sealFor picks.
func snapshotServer(t *testing.T, id store.DBID, s sealedSnapshot, sealFor func(h *Hello) bool) string {
	return fakeSource(t, id, func(c net.Conn, h *Hello) error {
		if !h.Bootstrap {
			return WriteMessage(c, &Refuse{Code: RefuseLogTruncated, Reason: "gone"})
		}
		for _, m := range snapshotMessages(s, h, sealFor(h)) {
			if err := WriteMessage(c, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshotMessages is what a source sends after its Welcome to the
// bootstrap h: s's manifest, its files from the whole file h resumes at
// on, the seal if sealed, Done.
func snapshotMessages(s sealedSnapshot, h *Hello, sealed bool) []Message {
	msgs := []Message{s.manifest}
	from := 0
	if h.Resume.Snapshot == s.manifest.ID {
		from = int(h.Resume.File)
	}
	for i := from; i < len(s.files); i++ {
		b := s.files[i]
		if len(b) > 0 {
			msgs = append(msgs, &Chunk{File: uint32(i), Data: b})
		}
		msgs = append(msgs, &FileEnd{File: uint32(i), Size: uint64(len(b)), CRC: crc32.Checksum(b, crcTable)})
	}
	if s.seal != nil && sealed {
		msgs = append(msgs, s.seal)
	}
	return append(msgs, &Done{LastIndex: s.manifest.Index})
}

// A source that forges one value of the root's snapshot, keeping its head
// and relaying the root's seal, is refused by a replica that has the
// public key: nothing is installed, the refusal is counted and the
// download discarded. The same replica then bootstraps from the root,
// whose sealed snapshot it installs. A replica without the public key
// installs the forged value: what the seal prevents.
func TestBootstrapRefusesForgedSnapshot(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root, rootAddr := signingRoot(t, name, signer, 0)
	fill(t, root, "a", 300, 200)
	write(t, root, "k", "the root's value")
	writeN(t, root, "t", 20)

	genuine := fetchSealed(t, rootAddr, root)
	if genuine.seal == nil {
		t.Fatal("the root sent no seal")
	}
	forged := forgeValue(t, genuine, "k", "a forged value!!")
	forger := forgingSource(t, root.DBID(), forged)

	t.Run("without the public key the forgery is installed", func(t *testing.T) {
		rep := openStore(t, "", name, root.DBID(), store.Retention{})
		_, stop := startReplica(t, rep, NewProcessID(), []string{forger}, func(c *ReplicaConfig) {
			c.BootstrapLock = lockPath(t)
		})
		waitFor(t, "forged snapshot installed", 30*time.Second, func() bool { return rep.AppliedIndex() >= forged.manifest.Index })
		stop()
		if v, _ := lookupValue(t, rep, "k"); v != "a forged value!!" {
			t.Fatalf("k = %q: the forgery did not take", v)
		}
	})

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	refused, errs := bootstrapsOf(t, name, "seal_refused"), errCount(t, name, kindSeal)
	_, stop := startReplica(t, rep, NewProcessID(), []string{forger}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.Verifier = verifier
	})
	// The refused bootstrap is counted as it returns, its error by the
	// replica's loop right after: stopping the replica in between would
	// cancel the second count, so both are waited for.
	waitFor(t, "forged snapshot refused and its error counted", 30*time.Second, func() bool {
		return bootstrapsOf(t, name, "seal_refused") > refused && errCount(t, name, kindSeal) > errs
	})
	stop()
	if rep.AppliedIndex() != 0 {
		t.Fatalf("applied index %d after a refused snapshot", rep.AppliedIndex())
	}
	if _, found := lookupValue(t, rep, "k"); found {
		t.Fatal("a key of the refused snapshot is served")
	}
	if _, err := os.Stat(store.StagingDir(rep.Options().Dir)); !os.IsNotExist(err) {
		t.Fatalf("refused download kept: %v", err)
	}

	installed := bootstrapsOf(t, name, "installed")
	startReplica(t, rep, NewProcessID(), []string{rootAddr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = 1 // a new replica: bootstrap rather than replay
		c.Verifier = verifier
	})
	waitFor(t, "the root's snapshot installed", 30*time.Second, func() bool { return bootstrapsOf(t, name, "installed") > installed })
	waitCaughtUp(t, rep, root)
	assertSame(t, rep, root)
	if v, _ := lookupValue(t, rep, "k"); v != "the root's value" {
		t.Fatalf("k = %q", v)
	}
}

// A source without the signing key (a replica) refuses at once a
// bootstrap that asks for the root's seal, before making a snapshot; a
// snapshot that arrives without a seal is refused all the same.
func TestBootstrapUnsealedRefused(t *testing.T) {
	_, verifier := testKeys(t)
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), nil)
	fill(t, root, "a", 100, 200)

	unsealable := value(metricsOf(t).snapshotsServed.WithLabelValues("unsealable"))
	c, m := rawSession(t, addr, &Hello{Version: SealVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID(), Bootstrap: true})
	c.Close()
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseUnavailable {
		t.Fatalf("a bootstrap asking for a seal from a node without the key: %v", m)
	}
	if n := value(metricsOf(t).snapshotsServed.WithLabelValues("unsealable")); n != unsealable+1 {
		t.Fatalf("unsealable transfers %v -> %v", unsealable, n)
	}

	// A lying source that ignores the request and sends the snapshot
	// without a seal: received, then refused.
	signer, _ := testKeys(t)
	sealing := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	s := fetchSealed(t, sealing, root)
	s.seal = nil
	liar := forgingSource(t, root.DBID(), s)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	refused := bootstrapsOf(t, name, "seal_refused")
	startReplica(t, rep, NewProcessID(), []string{liar}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.Verifier = verifier
	})
	waitFor(t, "unsealed snapshot refused", 30*time.Second, func() bool { return bootstrapsOf(t, name, "seal_refused") > refused })
	if rep.AppliedIndex() != 0 {
		t.Fatalf("applied index %d after an unsealed snapshot", rep.AppliedIndex())
	}
}

// signingRoot opens a root of database name, keeping 5 entries of log
// (so a new replica bootstraps), and serves it with signer signing its
// heads and seals; chunkBytes, if not 0, sets the snapshot chunk size.
func signingRoot(t *testing.T, name string, signer *headsig.Signer, chunkBytes int) (*store.Store, string) {
	t.Helper()
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		if chunkBytes != 0 {
			c.ChunkBytes = chunkBytes
		}
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	return root, addr
}

// A seal comes only to a bootstrap that asks for it: a replica without
// the public key, sent one anyway, refuses the source as malformed
// (counted) and installs nothing; the files it received stay for a
// source that speaks the protocol.
func TestBootstrapRefusesUnaskedSeal(t *testing.T) {
	signer, _ := testKeys(t)
	name := dbName(t)
	root, addr := signingRoot(t, name, signer, 0)
	fill(t, root, "a", 100, 200)
	s := fetchSealed(t, addr, root)
	src := snapshotServer(t, root.DBID(), s, func(*Hello) bool { return true })

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Database: name, Sources: []string{src}, BootstrapLock: lockPath(t), ProcessID: NewProcessID()}, rep, quiet)
	if err != nil {
		t.Fatal(err)
	}
	installed := bootstrapsOf(t, name, "installed")
	err = r.Bootstrap(context.Background(), src, 0)
	if !errors.Is(err, ErrMalformed) || errorKind(err) != kindDecode {
		t.Fatalf("a seal the bootstrap did not ask for: %v (kind %q), want %v", err, errorKind(err), ErrMalformed)
	}
	if rep.AppliedIndex() != 0 || bootstrapsOf(t, name, "installed") != installed {
		t.Fatalf("applied index %d after an unasked seal", rep.AppliedIndex())
	}
	if r := rep.OpenBootstrap(store.BootstrapHooks{}).Resume(); r.Snapshot != s.manifest.ID.String() || r.File != len(s.files) {
		t.Fatalf("download after the refusal: %+v, want all %d files of %s kept", r, len(s.files), s.manifest.ID)
	}
}

// A connection torn in the middle of the seal, every file received, leaves
// the download whole on disk: the next session asks to resume after the
// last file, receives only the seal, checks it against the files as they
// are on disk, and installs.
func TestBootstrapSealTornResumes(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root, addr := signingRoot(t, name, signer, 0)
	fill(t, root, "a", 300, 200)
	s := fetchSealed(t, addr, root)
	var (
		mu      sync.Mutex
		resumes []ResumePoint
	)
	src := fakeSource(t, root.DBID(), func(c net.Conn, h *Hello) error {
		if !h.Bootstrap {
			return WriteMessage(c, &Refuse{Code: RefuseLogTruncated, Reason: "gone"})
		}
		mu.Lock()
		resumes = append(resumes, h.Resume)
		first := len(resumes) == 1
		mu.Unlock()
		for _, m := range snapshotMessages(s, h, true) {
			frame, err := AppendFrame(nil, m)
			if err != nil {
				return err
			}
			if _, ok := m.(*Seal); ok && first {
				c.Write(frame[:len(frame)/2])
				return errors.New("torn")
			}
			if _, err := c.Write(frame); err != nil {
				return err
			}
		}
		return nil
	})

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Database: name, Sources: []string{src}, BootstrapLock: lockPath(t), ProcessID: NewProcessID(),
		Verifier: verifier}, rep, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Bootstrap(ctx, src, 0); err == nil {
		t.Fatal("a bootstrap torn in the middle of the seal installed")
	}
	if rep.AppliedIndex() != 0 {
		t.Fatalf("applied index %d after a torn seal", rep.AppliedIndex())
	}
	if err := r.Bootstrap(ctx, src, 0); err != nil {
		t.Fatalf("bootstrap resumed after a torn seal: %v", err)
	}
	if rep.AppliedIndex() != s.manifest.Index {
		t.Fatalf("applied index %d, want the snapshot's %d", rep.AppliedIndex(), s.manifest.Index)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumes) != 2 || resumes[1].Snapshot != s.manifest.ID || int(resumes[1].File) != len(s.files) || resumes[1].Offset != 0 {
		t.Fatalf("resume points asked: %+v, want the second after all %d files", resumes, len(s.files))
	}
	if n := errCount(t, name, kindSeal); n != 0 {
		t.Fatalf("snapshot_seal errors %v", n)
	}
}

// quietPebble keeps Pebble's messages out of the test output.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// A replica relays a bootstrap that asks for the root's seal to its own
// source: a leaf with the public key whose only source is a replica
// bootstraps with the root's sealed snapshot through it.
func TestBootstrapSealedThroughReplica(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root, rootAddr := signingRoot(t, name, signer, 0)
	fill(t, root, "a", 300, 200)
	writeN(t, root, "t", 20)

	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	midPID := NewProcessID()
	mr, _ := startReplica(t, mid, midPID, []string{rootAddr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.Verifier = verifier
	})
	midAddr := startServer(t, mid, midPID, func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Book: mr.Book(), Upstream: mr.DialSource} }
	})
	waitCaughtUp(t, mid, root)

	leaf := openStore(t, "", name, root.DBID(), store.Retention{})
	installed, relayed := bootstrapsOf(t, name, "installed"), value(metricsOf(t).snapshotsServed.WithLabelValues("relayed"))
	startReplica(t, leaf, NewProcessID(), []string{midAddr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = 1
		c.Verifier = verifier
	})
	waitFor(t, "the leaf's bootstrap installed", 30*time.Second, func() bool { return bootstrapsOf(t, name, "installed") > installed })
	waitCaughtUp(t, leaf, root)
	assertSame(t, leaf, root)
	if got := value(metricsOf(t).snapshotsServed.WithLabelValues("relayed")); got <= relayed {
		t.Fatalf("relayed bootstraps %v -> %v", relayed, got)
	}
	if n := errCount(t, name, kindSeal); n != 0 {
		t.Fatalf("snapshot_seal errors %v", n)
	}
}

// A relayed sealed bootstrap whose source drops the connection halfway is
// counted broken, not relayed, by the replica in between; the leaf
// resumes through it and installs the root's sealed snapshot.
func TestBootstrapSealedRelayUpstreamCut(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root, rootAddr := signingRoot(t, name, signer, 64<<10)
	fill(t, root, "b", 3000, 1000)
	writeN(t, root, "t", 20)
	cp := filepath.Join(t.TempDir(), "probe")
	if _, err := root.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	upAddr, cut := cuttingProxy(t, rootAddr, int(dirSize(t, cp)/2))

	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	midPID := NewProcessID()
	startReplica(t, mid, midPID, []string{rootAddr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.Verifier = verifier
	})
	midAddr := startServer(t, mid, midPID, func(c *ServerConfig) {
		c.Heads = func(string) HeadSource {
			return HeadSource{Upstream: func(ctx context.Context) (net.Conn, string, error) {
				c, err := net.Dial("tcp", upAddr)
				return c, upAddr, err
			}}
		}
	})
	waitCaughtUp(t, mid, root)

	leaf := openStore(t, "", name, root.DBID(), store.Retention{})
	installed := bootstrapsOf(t, name, "installed")
	relayed, broken := value(metricsOf(t).snapshotsServed.WithLabelValues("relayed")), value(metricsOf(t).snapshotsServed.WithLabelValues("broken"))
	startReplica(t, leaf, NewProcessID(), []string{midAddr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = 1
		c.Verifier = verifier
	})
	waitFor(t, "the leaf's bootstrap installed", 60*time.Second, func() bool { return bootstrapsOf(t, name, "installed") > installed })
	waitCaughtUp(t, leaf, root)
	assertSame(t, leaf, root)
	if !cut() {
		t.Fatal("the proxy never cut the transfer")
	}
	// The relay counts its side of the cut transfer broken. (The root's
	// side is broken or complete: it may have handed all its bytes to
	// the kernel before the proxy cut, which then drops them.)
	if got := value(metricsOf(t).snapshotsServed.WithLabelValues("broken")); got < broken+1 {
		t.Fatalf("broken transfers %v -> %v: want the relay's", broken, got)
	}
	if got := value(metricsOf(t).snapshotsServed.WithLabelValues("relayed")); got != relayed+1 {
		t.Fatalf("relayed bootstraps %v -> %v: want the one that ended", relayed, got)
	}
	if n := errCount(t, name, kindSeal); n != 0 {
		t.Fatalf("snapshot_seal errors %v", n)
	}
}

// A relayed answer ended only after a whole Done or Refuse, wherever
// its bytes are split.
func TestFrameTail(t *testing.T) {
	var stream []byte
	for _, m := range []Message{&Chunk{File: 0, Data: bytes.Repeat([]byte{1}, 300)}, &FileEnd{File: 0, Size: 300}, &Done{LastIndex: 9}} {
		f, err := AppendFrame(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, f...)
	}
	refuse, err := AppendFrame(nil, &Refuse{Code: RefuseUnavailable, Reason: "no"})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{stream, refuse} {
		for cut := 0; cut <= len(b); cut++ {
			for _, step := range []int{1, 7, len(b)} {
				var ft frameTail
				for p := b[:cut]; len(p) > 0; p = p[min(step, len(p)):] {
					ft.write(p[:min(step, len(p))])
				}
				if want := cut == len(b); ft.ended() != want {
					t.Fatalf("%d of %d bytes in writes of %d: ended %v, want %v", cut, len(b), step, ft.ended(), want)
				}
			}
		}
	}
}

// Sources in a cycle do not relay a sealed bootstrap around it for ever:
// the server it comes back to refuses it.
func TestBootstrapSealRelayCycle(t *testing.T) {
	name := dbName(t)
	st := openStore(t, "", name, store.DBID{}, store.Retention{})
	write(t, st, "k", "v")
	var self string
	self = startServer(t, st, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource {
			return HeadSource{Upstream: func(ctx context.Context) (net.Conn, string, error) {
				c, err := net.Dial("tcp", self)
				return c, self, err
			}}
		}
	})
	_, m := rawSession(t, self, &Hello{Version: SealVersion, Database: name, DBID: st.DBID(), ProcessID: NewProcessID(), Bootstrap: true})
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseCycle {
		t.Fatalf("a sealed bootstrap relayed back to the same server: %v", m)
	}
}

// A sealed bootstrap cut off halfway resumes and still verifies: the seal
// covers every file, the ones received before the cut included, and the
// root reads again the file it sent in part.
func TestBootstrapSealedResumesAfterCut(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root, src := signingRoot(t, name, signer, 64<<10)
	fill(t, root, "b", 3000, 1000)
	cp := filepath.Join(t.TempDir(), "probe")
	if _, err := root.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	addr, cut := cuttingProxy(t, src, int(dirSize(t, cp)/2))

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.Verifier = verifier
	})
	waitFor(t, "sealed bootstrap installed", 60*time.Second, func() bool { return bootstrapsOf(t, name, "installed") == 1 })
	waitCaughtUp(t, rep, root)
	assertSame(t, rep, root)
	if !cut() {
		t.Fatal("the proxy never cut the transfer")
	}
	if bootstrapsOf(t, name, "interrupted") != 1 || value(metricsOf(t).bootstrapResumedBytes.WithLabelValues(name)) == 0 {
		t.Fatalf("bootstraps: %v interrupted, %v bytes resumed", bootstrapsOf(t, name, "interrupted"), value(metricsOf(t).bootstrapResumedBytes.WithLabelValues(name)))
	}
	if n := errCount(t, name, kindSeal); n != 0 {
		t.Fatalf("snapshot_seal errors %v", n)
	}
}
