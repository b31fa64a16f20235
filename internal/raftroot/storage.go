package raftroot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// diskStorage keeps a member's Raft state durable in its own Pebble
// instance (<data>/<db>.raft/), apart from the store: the hard state, the
// log entries not yet compacted, the last snapshot's metadata, and the
// identity of the member. Raft reads the log from a raft.MemoryStorage
// loaded from it at start and updated after every durable write.
//
//	"id"        → cluster id (16) node id (8)
//	"hs"        → crc(4) HardState
//	"snap"      → crc(4) Snapshot (metadata and the small Data of snapshot.go)
//	"e"<BE64 i> → crc(4) Entry i
//
// Every value carries a CRC-32C of what follows it: a value that fails it
// makes Open fail with ErrCorruptStorage, leaving the files untouched.
type diskStorage struct {
	db   *pebble.DB
	mem  *raft.MemoryStorage
	last uint64 // last index on disk (0: none)
}

// ErrCorruptStorage: the Raft storage failed an integrity check.
var ErrCorruptStorage = errors.New("qs: raft storage is corrupt")

// ErrWrongMember: the Raft storage belongs to another node or cluster.
var ErrWrongMember = errors.New("qs: raft storage belongs to another member")

var (
	keyID   = []byte("id")
	keyHS   = []byte("hs")
	keySnap = []byte("snap")
)

func entryKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'e'}, i) }

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func seal(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), crc32.Checksum(b, crcTable))
	return append(out, b...), nil
}

func unseal(v []byte, m proto.Message, what string) error {
	if len(v) < 4 || binary.BigEndian.Uint32(v) != crc32.Checksum(v[4:], crcTable) {
		return fmt.Errorf("%w: %s fails its checksum", ErrCorruptStorage, what)
	}
	if err := proto.Unmarshal(v[4:], m); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorruptStorage, what, err)
	}
	return nil
}

// openDiskStorage opens (or creates) the Raft storage in dir for node id of
// cluster, and loads it. fresh reports that it held nothing yet.
func openDiskStorage(dir string, fs vfs.FS, cluster [16]byte, id uint64, log *slog.Logger) (d *diskStorage, fresh bool, err error) {
	if fs == nil {
		fs = vfs.Default
	}
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: quietPebble{log}})
	if err != nil {
		return nil, false, fmt.Errorf("open raft storage %s: %w", dir, err)
	}
	d = &diskStorage{db: db, mem: raft.NewMemoryStorage()}
	defer func() {
		if err != nil {
			db.Close()
			d = nil
		}
	}()
	want := binary.BigEndian.AppendUint64(append([]byte(nil), cluster[:]...), id)
	v, closer, err := db.Get(keyID)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := db.Set(keyID, want, pebble.Sync); err != nil {
			return nil, false, fmt.Errorf("raft storage %s: %w", dir, err)
		}
		return d, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("raft storage %s: %w", dir, err)
	}
	got := append([]byte(nil), v...)
	closer.Close()
	if len(got) != 24 {
		return nil, false, fmt.Errorf("%w: identity record of %d bytes in %s", ErrCorruptStorage, len(got), dir)
	}
	if string(got) != string(want) {
		return nil, false, fmt.Errorf("%w: %s holds node %d of cluster %x; this is node %d of cluster %x",
			ErrWrongMember, dir, binary.BigEndian.Uint64(got[16:]), got[:16], id, cluster)
	}
	if err := d.load(); err != nil {
		return nil, false, fmt.Errorf("raft storage %s: %w", dir, err)
	}
	hs, _, _ := d.mem.InitialState()
	last, _ := d.mem.LastIndex()
	fresh = raft.IsEmptyHardState(hs) && last == 0
	return d, fresh, nil
}

func (d *diskStorage) load() error {
	get := func(k []byte, m proto.Message, what string) (bool, error) {
		v, closer, err := d.db.Get(k)
		if errors.Is(err, pebble.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		defer closer.Close()
		return true, unseal(v, m, what)
	}
	snap := &pb.Snapshot{}
	if ok, err := get(keySnap, snap, "snapshot record"); err != nil {
		return err
	} else if ok {
		if err := d.mem.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("%w: snapshot record: %v", ErrCorruptStorage, err)
		}
	}
	hs := &pb.HardState{}
	if ok, err := get(keyHS, hs, "hard state"); err != nil {
		return err
	} else if ok {
		if err := d.mem.SetHardState(hs); err != nil {
			return err
		}
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
	if err != nil {
		return err
	}
	defer it.Close()
	var ents []*pb.Entry
	for ok := it.First(); ok; ok = it.Next() {
		e := &pb.Entry{}
		if len(it.Key()) != 9 {
			return fmt.Errorf("%w: entry key %x", ErrCorruptStorage, it.Key())
		}
		i := binary.BigEndian.Uint64(it.Key()[1:])
		if err := unseal(it.Value(), e, fmt.Sprintf("entry %d", i)); err != nil {
			return err
		}
		if e.GetIndex() != i || (len(ents) > 0 && i != ents[len(ents)-1].GetIndex()+1) {
			return fmt.Errorf("%w: entry %d stored at %d or not contiguous", ErrCorruptStorage, e.GetIndex(), i)
		}
		ents = append(ents, e)
	}
	if err := it.Error(); err != nil {
		return err
	}
	if len(ents) > 0 {
		d.last = ents[len(ents)-1].GetIndex()
		if err := d.mem.Append(ents); err != nil {
			return fmt.Errorf("%w: entries: %v", ErrCorruptStorage, err)
		}
	}
	return nil
}

// save makes a Ready's state durable (one fsynced batch when sync), then
// hands it to the in-memory log that Raft reads.
func (d *diskStorage) save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	b := d.db.NewBatch()
	defer b.Close()
	hasSnap := snap != nil && !raft.IsEmptySnap(snap)
	if hasSnap {
		v, err := seal(snap)
		if err != nil {
			return err
		}
		b.Set(keySnap, v, nil)
		// A received snapshot replaces the whole log (as in the in-memory
		// log); entries that follow it arrive after.
		b.DeleteRange(entryKey(0), []byte{'f'}, nil)
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		v, err := seal(hs)
		if err != nil {
			return err
		}
		b.Set(keyHS, v, nil)
	}
	last := d.last
	if hasSnap {
		last = 0
	}
	if len(ents) > 0 {
		first := ents[0].GetIndex()
		if last >= first {
			// A new leader overwrote the tail: drop the conflicting entries.
			b.DeleteRange(entryKey(first), entryKey(last+1), nil)
		}
		for _, e := range ents {
			v, err := seal(e)
			if err != nil {
				return err
			}
			b.Set(entryKey(e.GetIndex()), v, nil)
		}
		last = ents[len(ents)-1].GetIndex()
	}
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("persist raft state: %w", err)
	}
	d.last = last
	if hasSnap {
		if err := d.mem.ApplySnapshot(snap); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if err := d.mem.SetHardState(hs); err != nil {
			return err
		}
	}
	if len(ents) > 0 {
		return d.mem.Append(ents)
	}
	return nil
}

// compact records a snapshot of the applied state at index i and drops
// the entries up to keepFrom (exclusive) from memory and disk.
func (d *diskStorage) compact(i uint64, cs *pb.ConfState, data []byte, keepFrom uint64) error {
	snap, err := d.mem.CreateSnapshot(i, cs, data)
	if err != nil {
		return err
	}
	v, err := seal(snap)
	if err != nil {
		return err
	}
	b := d.db.NewBatch()
	defer b.Close()
	b.Set(keySnap, v, nil)
	if keepFrom > 1 {
		b.DeleteRange(entryKey(0), entryKey(keepFrom), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("persist raft snapshot: %w", err)
	}
	if keepFrom > 1 {
		if err := d.mem.Compact(keepFrom - 1); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	return nil
}

// sizeBytes is the disk space of the Raft storage.
func (d *diskStorage) sizeBytes() uint64 { return d.db.Metrics().DiskSpaceUsage() }

func (d *diskStorage) close() error { return d.db.Close() }

// quietPebble routes Pebble's messages to slog at debug level; Fatalf
// exits like the store's (a failed WAL write leaves no safe continuation).
type quietPebble struct{ l *slog.Logger }

func (p quietPebble) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p quietPebble) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}
func (p quietPebble) Fatalf(format string, args ...any) {
	p.l.Error("raft storage engine failed; exiting to restart from durable state", "err", fmt.Sprintf(format, args...))
	os.Exit(70)
}

// State is what a stopped member's Raft storage holds (for tools and
// tests): the hard state and the range of log entries kept.
type State struct {
	Term, Commit     uint64
	FirstIndex, Last uint64
	SnapshotIndex    uint64
}

// ReadState opens the Raft storage in dir read-only and reads its state.
func ReadState(dir string) (State, error) {
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietPebble{slog.New(slog.DiscardHandler)}})
	if err != nil {
		return State{}, err
	}
	defer db.Close()
	d := &diskStorage{db: db, mem: raft.NewMemoryStorage()}
	if err := d.load(); err != nil {
		return State{}, err
	}
	hs, _, _ := d.mem.InitialState()
	snap, _ := d.mem.Snapshot()
	first, _ := d.mem.FirstIndex()
	last, _ := d.mem.LastIndex()
	return State{Term: hs.GetTerm(), Commit: hs.GetCommit(), FirstIndex: first, Last: last, SnapshotIndex: snap.GetMetadata().GetIndex()}, nil
}
