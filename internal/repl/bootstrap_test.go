package repl

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// fill writes n keys of size bytes each in batches of 100, values
// differing per key so compression cannot shrink the snapshot away.
func fill(t *testing.T, st *store.Store, prefix string, n, size int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 100 {
		var ops []wal.Op
		for j := i; j < min(i+100, n); j++ {
			v := make([]byte, size)
			x := uint32(j)*2654435761 + 7
			for k := range v {
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				v[k] = byte(x)
			}
			ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(fmt.Sprintf("%s%06d", prefix, j)), Value: v})
		}
		if _, err := st.Write(ctx, store.Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
}

func lockPath(t *testing.T) string { return filepath.Join(t.TempDir(), "bootstrap.lock") }

func bootstrapsOf(t *testing.T, db, result string) float64 {
	return value(metricsOf(t).bootstraps.WithLabelValues(db, result))
}

// waitBootstrapEnded waits for r's bootstrap session to end. A replica
// shows the snapshot's index as soon as it is installed, a moment before
// the session records its outcome (qs_repl_bootstraps_total, progress).
func waitBootstrapEnded(t *testing.T, r *Replica) {
	t.Helper()
	waitFor(t, "the bootstrap session to end", 30*time.Second, func() bool { return !r.State().Bootstrap.Active })
}

// A replica behind the source's retained log bootstraps from a snapshot,
// then continues through the log, and keeps streaming afterwards.
func TestBootstrapWhenBehindTheLog(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), nil)
	fill(t, root, "a", 2000, 700)
	writeN(t, root, "t", 40)
	if lr, _ := root.LogRange(); lr.First <= 1 {
		t.Fatalf("log not truncated: %+v", lr)
	}
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = -1 // only because the log is gone
	})
	waitCaughtUp(t, rep, root)
	waitBootstrapEnded(t, r)
	assertSame(t, rep, root)
	if got := bootstrapsOf(t, name, "installed"); got != 1 {
		t.Fatalf("%v bootstraps installed, want 1", got)
	}
	if errCount(t, name, kindBootstrap) < 1 {
		t.Fatal("the refusal that led to the bootstrap was not counted")
	}
	st := r.State()
	if st.Bootstrap.Finished.IsZero() || st.Bootstrap.BytesDone != st.Bootstrap.BytesTotal || st.Bootstrap.BytesTotal == 0 ||
		st.Bootstrap.FilesDone != st.Bootstrap.FilesTotal || st.Bootstrap.Active {
		t.Fatalf("bootstrap progress %+v", st.Bootstrap)
	}
	// Streaming continues after the install.
	writeN(t, root, "u", 30)
	waitCaughtUp(t, rep, root)
	assertSame(t, rep, root)
	for _, d := range []string{store.StagingDir(rep.Options().Dir), store.ReadyDir(rep.Options().Dir)} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left behind", d)
		}
	}
	if r := mustVerifyStore(t, rep); r != nil {
		t.Fatal(r)
	}
}

func mustVerifyStore(t *testing.T, st *store.Store) error {
	rep, err := st.Verify()
	if err != nil {
		return err
	}
	if !rep.Clean() {
		return fmt.Errorf("verify: %d problems: %v", rep.ProblemCount, rep.Problems)
	}
	return nil
}

// A new replica far behind bootstraps instead of replaying; a second one
// bootstrapping soon after shares the same snapshot.
func TestBootstrapNewReplicaSharesSnapshot(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "n", 300)
	var ids []string
	for i := range 2 {
		rep := openStore(t, "", name, root.DBID(), store.Retention{})
		r, stop := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
			c.BootstrapLock = lockPath(t)
			c.BootstrapMinEntries = 100
		})
		waitCaughtUp(t, rep, root)
		stop()
		assertSame(t, rep, root)
		if got := bootstrapsOf(t, name, "installed"); got != float64(i+1) {
			t.Fatalf("replica %d: %v bootstraps, want %d", i, got, i+1)
		}
		ids = append(ids, r.State().Bootstrap.Snapshot)
	}
	if ids[0] != ids[1] || ids[0] == "" {
		t.Fatalf("snapshots %q: want one shared", ids)
	}
	// A replica with applied entries never bootstraps just for being behind.
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	es, _ := root.ReadLog(1, 10, 1<<20)
	if err := rep.Apply(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = 100
	})
	waitCaughtUp(t, rep, root)
	if got := bootstrapsOf(t, name, "installed"); got != 2 {
		t.Fatalf("a replica with a log bootstrapped (%v)", got)
	}
}

// cuttingProxy forwards connections to target, and cuts the first one
// that carries more than cutAfter bytes from the server right there.
func cuttingProxy(t *testing.T, target string, cutAfter int) (addr string, cut func() bool) {
	ln := listen(t)
	var mu sync.Mutex
	did := false
	serveConns(t, ln, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { io.Copy(up, c); up.Close() }()
		mu.Lock()
		done := did
		mu.Unlock()
		if done {
			io.Copy(c, up)
			return
		}
		if n, _ := io.CopyN(c, up, int64(cutAfter)); n == int64(cutAfter) {
			mu.Lock()
			did = true
			mu.Unlock()
		}
	})
	return ln.Addr().String(), func() bool { mu.Lock(); defer mu.Unlock(); return did }
}

// A bootstrap cut off halfway resumes where it stopped: the bytes already
// on disk are not sent again.
func TestBootstrapResumesAfterCut(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	src := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.ChunkBytes = 64 << 10 })
	fill(t, root, "b", 6000, 1000)
	cp := filepath.Join(t.TempDir(), "probe")
	if _, err := root.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	size := dirSize(t, cp)
	cutAt := int(size / 2)
	addr, cut := cuttingProxy(t, src, cutAt)

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	before := value(metricsOf(t).bootstrapBytes.WithLabelValues(name))
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
	})
	waitCaughtUp(t, rep, root)
	waitBootstrapEnded(t, r)
	assertSame(t, rep, root)
	if !cut() {
		t.Fatal("the proxy never cut the transfer")
	}
	received := value(metricsOf(t).bootstrapBytes.WithLabelValues(name)) - before
	resumed := value(metricsOf(t).bootstrapResumedBytes.WithLabelValues(name))
	if bootstrapsOf(t, name, "interrupted") != 1 || bootstrapsOf(t, name, "installed") != 1 {
		t.Fatalf("bootstraps: %v interrupted, %v installed", bootstrapsOf(t, name, "interrupted"), bootstrapsOf(t, name, "installed"))
	}
	// Everything arrived once, give or take the chunk in flight at the cut.
	if resumed < float64(cutAt)/2 || received > float64(size)+float64(256<<10) {
		t.Fatalf("snapshot of %d bytes: received %v, resumed from %v (cut at %d)", size, received, resumed, cutAt)
	}
	t.Logf("snapshot %d bytes, cut at %d, resumed from %v, received %v in all", size, cutAt, resumed, received)
}

func dirSize(t *testing.T, dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, _ := e.Info()
		n += fi.Size()
	}
	return n
}

// A flipped byte in the snapshot stream is caught by the frame CRC; a
// source sending a file whose bytes do not match its CRC, or a file name
// escaping the staging directory, is refused; nothing is installed and
// the replica's data is untouched.
func TestBootstrapBadInput(t *testing.T) {
	t.Run("flipped byte", func(t *testing.T) {
		name := dbName(t)
		root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
		src := startServer(t, root, NewProcessID(), nil)
		fill(t, root, "c", 500, 900)
		addr, flipped := corruptingProxy(t, src, 200<<10)
		rep := openStore(t, "", name, root.DBID(), store.Retention{})
		crcBefore := errCount(t, name, kindCRC)
		startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.BootstrapLock = lockPath(t) })
		waitCaughtUp(t, rep, root)
		assertSame(t, rep, root)
		if !flipped() || errCount(t, name, kindCRC) <= crcBefore {
			t.Fatalf("flip %v, crc errors %v", flipped(), errCount(t, name, kindCRC)-crcBefore)
		}
	})
	lying := func(t *testing.T, files []SnapshotFile, msgs ...Message) (*store.Store, *Replica, string) {
		name := dbName(t)
		rep := openStore(t, "", name, store.DBID{9}, store.Retention{})
		es := sealed(1, wal.Hash{}, 3)
		if err := rep.Apply(context.Background(), es); err != nil {
			t.Fatal(err)
		}
		addr := lyingSource(t, rep.DBID(), func(h *Hello) []Message {
			if !h.Bootstrap {
				return []Message{&Refuse{Code: RefuseLogTruncated, Reason: "gone"}}
			}
			return append([]Message{&Snapshot{ID: SnapshotID{1}, Index: 50, Files: files}}, msgs...)
		})
		r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.BootstrapLock = lockPath(t) })
		return rep, r, name
	}
	t.Run("file CRC mismatch", func(t *testing.T) {
		data := []byte("not a table at all")
		rep, _, name := lying(t, []SnapshotFile{{"000001.sst", uint64(len(data))}},
			&Chunk{File: 0, Offset: 0, Data: data},
			&FileEnd{File: 0, Size: uint64(len(data)), CRC: crc32.Checksum(data, crcTable) ^ 1})
		before := errCount(t, name, kindCRC)
		waitFor(t, "file CRC error", 10*time.Second, func() bool { return errCount(t, name, kindCRC) > before })
		if rep.AppliedIndex() != 3 {
			t.Fatalf("applied %d", rep.AppliedIndex())
		}
		// The bad file is not kept for a resume.
		fi, err := os.Stat(filepath.Join(store.StagingDir(rep.Options().Dir), "000001.sst"))
		if err == nil && fi.Size() != 0 {
			t.Fatalf("bad file kept with %d bytes", fi.Size())
		}
	})
	for _, bad := range []string{"../escape", "/abs", store.BootstrapRecord, "a/b", ""} {
		t.Run("file name "+bad, func(t *testing.T) {
			rep, r, name := lying(t, []SnapshotFile{{bad, 1}}, &Chunk{Data: []byte("x")})
			before := errCount(t, name, kindDecode)
			waitFor(t, "manifest refused", 10*time.Second, func() bool { return errCount(t, name, kindDecode) > before })
			if rep.AppliedIndex() != 3 || r.State().Bootstrap.FilesDone != 0 {
				t.Fatalf("applied %d, progress %+v", rep.AppliedIndex(), r.State().Bootstrap)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(rep.Options().Dir), "escape")); err == nil {
				t.Fatal("a file was written outside the staging directory")
			}
		})
	}
	t.Run("chunk out of place", func(t *testing.T) {
		_, _, name := lying(t, []SnapshotFile{{"f", 10}}, &Chunk{File: 0, Offset: 5, Data: []byte("abc")})
		before := errCount(t, name, kindDecode)
		waitFor(t, "chunk refused", 10*time.Second, func() bool { return errCount(t, name, kindDecode) > before })
	})
}

// Only one bootstrap per host runs at a time: a second waits for the lock.
func TestBootstrapHostLock(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "h", 50)
	lock := lockPath(t)
	unlock, err := hostLock(context.Background(), lock)
	if err != nil {
		t.Fatal(err)
	}
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.BootstrapLock = lock })
	waitFor(t, "waiting for the lock", 10*time.Second, func() bool {
		s := r.State()
		return s.Status == StatusBootstrapping && s.Bootstrap.Waiting
	})
	time.Sleep(300 * time.Millisecond)
	if rep.AppliedIndex() != 0 || value(metricsOf(t).bootstrapping.WithLabelValues(name)) != 1 {
		t.Fatal("bootstrapped while another held the host lock")
	}
	unlock()
	waitCaughtUp(t, rep, root)
	assertSame(t, rep, root)
}

// The server paces snapshot bytes to BootstrapRate.
func TestBootstrapRateLimit(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	const rate = 2 << 20
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.BootstrapRate = rate; c.ChunkBytes = 64 << 10 })
	fill(t, root, "r", 3000, 1000)
	cp := filepath.Join(t.TempDir(), "probe")
	if _, err := root.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	size := dirSize(t, cp)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	t0 := time.Now()
	startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.BootstrapLock = lockPath(t) })
	waitCaughtUp(t, rep, root)
	took := time.Since(t0)
	// The burst is max(chunk, rate) bytes; the rest is paced.
	if min := time.Duration(float64(size-rate) / rate * float64(time.Second)); took < min {
		t.Fatalf("%d bytes in %v at %d B/s: want at least %v", size, took, rate, min)
	}
	t.Logf("%d bytes in %v (limit %d B/s)", size, took, rate)
}

// The source removes its snapshots when it stops.
func TestSnapshotsRemovedAtShutdown(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	srv, err := NewServer(ServerConfig{Metrics: metricsOf(t), ProcessID: NewProcessID()}, func(db string) (*store.Store, bool) { return root, db == name }, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go srv.Serve(ln)
	writeN(t, root, "s", 30)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	_, stop := startReplica(t, rep, NewProcessID(), []string{ln.Addr().String()}, func(c *ReplicaConfig) { c.BootstrapLock = lockPath(t) })
	waitCaughtUp(t, rep, root)
	stop()
	snaps := root.Options().Dir + ".snapshots"
	if ents, _ := os.ReadDir(snaps); len(ents) != 1 {
		t.Fatalf("%d snapshots held while fresh, want 1", len(ents))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(snaps); len(ents) != 0 {
		t.Fatalf("%d snapshots left after shutdown", len(ents))
	}
}

// A partial download left by an earlier run (killed while bootstrapping)
// is resumed by the next bootstrap; but a replica that no longer needs one
// (its source, or another, still has the log it needs) kept it for good,
// up to a whole database's size. Once the log streams, it is removed.
func TestPartialBootstrapRemovedOnceTheLogStreams(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "p", 30)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	staging := store.StagingDir(rep.Options().Dir)
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf(`{"db_id":%q,"source":"elsewhere:1","snapshot":"00112233445566778899aabbccddeeff","index":9000,"files":[{"name":"000001.sst","size":4096}],"done":0}`, root.DBID())
	if err := os.WriteFile(filepath.Join(staging, store.BootstrapRecord), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "000001.sst"), make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.BootstrapLock = lockPath(t) })
	waitCaughtUp(t, rep, root)
	write(t, root, "after", "x")
	waitCaughtUp(t, rep, root)
	waitFor(t, "the partial download to be removed", 2*time.Second, func() bool {
		_, err := os.Stat(staging)
		return errors.Is(err, os.ErrNotExist)
	})
}

// A replica of an HA root bootstraps from a member, whose store records
// the Raft index of the last command it applied (mraft): the checkpoint
// brings it along, and a store with a Raft index refuses replicated
// entries (they would fork a member's log). The replica then stayed at
// the snapshot's index for good, every session failing to apply.
func TestBootstrapFromRaftMemberFollowsTheLog(t *testing.T) {
	name := dbName(t)
	member := openStore(t, "", name, store.DBID{}, store.Retention{})
	raft := uint64(2)
	propose := func(n int, prefix string) {
		t.Helper()
		var cmds []store.RaftCommand
		for i := range n {
			raft++
			cmds = append(cmds, store.RaftCommand{RaftIndex: raft, Time: time.Now().UnixNano(),
				Batch: store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(fmt.Sprintf("%s%04d", prefix, i)), Value: []byte(prefix)}}}})
		}
		if _, err := member.ApplyRaft(context.Background(), cmds); err != nil {
			t.Fatal(err)
		}
	}
	propose(300, "a")
	addr := startServer(t, member, NewProcessID(), nil)
	rep := openStore(t, "", name, member.DBID(), store.Retention{})
	startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = 100
	})
	waitFor(t, "the bootstrap", 10*time.Second, func() bool { return bootstrapsOf(t, name, "installed") == 1 })
	propose(20, "b")
	waitCaughtUp(t, rep, member)
	assertSame(t, rep, member)
}

// A replica behind its upstream's retained log first asks its other
// sources (a secondary keeps a long log for this) and bootstraps only when
// none can continue its log: the first refusal made it download a whole
// snapshot from the upstream while the secondary could stream what it
// lacked. With the secondary down, it still bootstraps from the upstream.
func TestLogTruncatedTriesOtherSourcesFirst(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	upstream := startServer(t, root, NewProcessID(), nil)
	// The secondary: a copy of the root keeping the whole log (applied
	// here in small steps, so that the root's retention never outruns it).
	long := openStore(t, "", name, root.DBID(), store.Retention{})
	secondary := startServer(t, long, NewProcessID(), nil)
	for i := range 10 {
		for j := range 4 {
			write(t, root, fmt.Sprintf("t%d-%d", i, j), "v")
		}
		es, err := root.ReadLog(long.AppliedIndex()+1, 100, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := long.Apply(context.Background(), es); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, long, root)
	if lr, _ := root.LogRange(); lr.First <= 1 {
		t.Fatalf("log not truncated: %+v", lr)
	}

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	startReplica(t, rep, NewProcessID(), []string{upstream, secondary}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = -1
	})
	waitCaughtUp(t, rep, root)
	assertSame(t, rep, root)
	if got := bootstrapsOf(t, name, "installed") + bootstrapsOf(t, name, "failed") + bootstrapsOf(t, name, "interrupted"); got != 0 {
		t.Fatalf("%v bootstraps, want none: the secondary holds the log", got)
	}
	if got := errCount(t, name, kindBootstrap); got != 0 {
		t.Fatalf("went for a bootstrap %v times, want none: the secondary holds the log", got)
	}
	if got := value(metricsOf(t).clientRefused.WithLabelValues(name, RefuseLogTruncated.String())); got < 1 {
		t.Fatal("the upstream's refusal was not counted")
	}

	// A second replica whose secondary is down bootstraps from the
	// upstream.
	ln := listen(t)
	dead := ln.Addr().String()
	ln.Close()
	rep2 := openStore(t, "", name, root.DBID(), store.Retention{})
	startReplica(t, rep2, NewProcessID(), []string{upstream, dead}, func(c *ReplicaConfig) {
		c.BootstrapLock = lockPath(t)
		c.BootstrapMinEntries = -1
	})
	waitFor(t, "a bootstrap from the upstream", 10*time.Second, func() bool { return bootstrapsOf(t, name, "installed") == 1 })
	waitCaughtUp(t, rep2, root)
	assertSame(t, rep2, root)
}
