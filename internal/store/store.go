package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// DBID identifies a database across all its replicas.
type DBID [16]byte

func (id DBID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is unset.
func (id DBID) IsZero() bool { return id == DBID{} }

// ParseDBID parses the 32 hex digits String produces.
func ParseDBID(s string) (DBID, error) {
	var id DBID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("qs: bad database id %q: want 32 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}

// memTableBytes is Pebble's memtable size: small enough that replaying the
// WAL after a crash takes milliseconds, and that Pebble's WAL files (the
// open one, preallocated to about this size, and up to three recycled
// ones of the same size) take little disk beside the log.
const memTableBytes = 8 << 20

// Store is one database: its data, its log and its metadata in one Pebble
// instance. Reads run concurrently with everything; all writes go through
// one committer goroutine that owns the log tail (see commit.go).
type Store struct {
	opts Options
	db   *pebble.DB
	dbid DBID
	m    *storeMetrics

	// Published state, readable without locks. applied moves only after the
	// entry is durable; appliedPos, the same entry with its time, is
	// stored first, so a reader that sees an index finds its time or a
	// later one. applied alone is what reads check.
	applied    atomic.Uint64
	appliedPos atomic.Pointer[appliedRecord]
	// proposals stamps an HA root member's proposals (rootclock.go).
	proposals   proposalClock
	raftApplied atomic.Uint64 // see raftapply.go
	// viewAhead is the highest index a View was opened at while not yet
	// published (View's wait for it ran out); see View.
	viewAhead atomic.Uint64
	diskFull  atomic.Bool
	// segmentRoom is the space a log segment failed to take (ENOSPC):
	// disk-full mode lasts until it is free above the reserve too.
	segmentRoom atomic.Uint64
	// closed is set when Close begins. Readers check it so that a read
	// racing a shutdown gets ErrClosed; callers must still stop reading
	// before Close (Pebble refuses to close with iterators open).
	closed atomic.Bool
	// engine guards db against Replace: readers hold it shared for the
	// duration of a call (a View until Close); the committer holds it
	// exclusively while it swaps in a bootstrapped database. Nothing that
	// holds it shared may call another store method that takes it.
	engine sync.RWMutex

	mu struct {
		sync.Mutex
		// changed is closed and replaced whenever applied moves.
		changed chan struct{}
		closed  bool
	}

	cache *readCache
	// px is the state of a proxy store (proxy.go); nil for a full node.
	px *proxyState
	// bg tracks the store's goroutines other than the committer.
	bg sync.WaitGroup

	reqs    chan *request
	quit    chan struct{}
	stopped chan struct{}

	ballast string
	// sparseRetired: retired blocks a recount at open left sparse, for
	// the committer to free (retire.go).
	sparseRetired []uint64

	// segs holds the log blocks of durable commits (segment.go); nil for
	// a proxy. Guarded by engine like db. gate lets the segment collector
	// wait for views that may still reference a segment it removes;
	// collect keeps it from removing segments while a checkpoint links
	// them.
	segs    *segments
	gate    readGate
	collect sync.Mutex
}

// Open opens or creates the database in o.Dir.
func Open(o Options) (*Store, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		opts:    o,
		reqs:    make(chan *request, 1024),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		ballast: o.FS.PathJoin(o.Dir, "BALLAST"),
	}
	s.mu.changed = make(chan struct{})
	s.m = newStoreMetrics()
	if o.Proxy != nil {
		s.px = newProxyState(*o.Proxy, s.m)
	}
	if !o.ReadOnly {
		// A snapshot downloaded completely before a crash is installed now.
		if err := installReady(o); err != nil {
			return nil, fmt.Errorf("open store %s in %s: %w", o.Name, o.Dir, err)
		}
	}
	db, err := s.openEngine(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s in %s: %w", o.Name, o.Dir, inUse(o.Dir, err))
	}
	s.db = db
	s.cache = newReadCache(o.ReadCacheBytes, s.m)
	if err := s.loadMeta(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s in %s: %w", o.Name, o.Dir, err)
	}
	if err := s.openSegments(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s in %s: %w", o.Name, o.Dir, err)
	}
	if !o.ReadOnly {
		removeReplaced(o)
		removeCheckpoints(o)
		s.ensureBallast()
		go s.commitLoop()
		if s.segs != nil {
			s.bg.Add(1)
			go s.segmentLoop()
		}
		if s.px != nil {
			s.m.pxBudget.Set(float64(s.px.budget()))
			s.bg.Add(1)
			go s.keepProxyCache()
		}
	} else {
		close(s.stopped)
	}
	s.m.applied.Set(float64(s.applied.Load()))
	openStores.add(s)
	return s, nil
}

// openEngine opens the Pebble instance in dir with the store's options.
// Pebble creates dir and its missing parents, and syncs the parents so the
// new directories survive a power loss. (Creating them here first would
// hide them from that sync.)
func (s *Store) openEngine(dir string) (*pebble.DB, error) {
	o := s.opts
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	fs := o.FS
	if !o.ReadOnly && o.BallastBytes > 0 {
		fs = vfs.OnDiskFull(o.FS, s.releaseBallast)
	}
	popts := &pebble.Options{
		FS:                 fs,
		Cache:              cache,
		ReadOnly:           o.ReadOnly,
		ErrorIfNotExists:   o.ReadOnly,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{o.Logger.With("db", o.Name)},
		MemTableSize:       memTableBytes,
	}
	el := pebble.TeeEventListener(*stallListener(s.m), *damageListener(o.Name, s.m, o.Logger))
	popts.EventListener = &el
	// Pebble's own scheduler wakes ten times a second for good.
	popts.Experimental.CompactionScheduler = newCompactionScheduler()
	// Values of 1 KiB and more go to blob files: compactions move
	// references instead of rewriting them, which keeps write
	// amplification (and the CPU it steals from readers) low for large
	// configuration values and for log blocks.
	popts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		if o.Proxy != nil {
			// A proxy's values come and go (window, eviction): in blob
			// files, their space would come back only when a whole blob
			// file is rewritten; in tables, the next compaction drops it.
			return pebble.ValueSeparationPolicy{}
		}
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           1024,
			MaxBlobReferenceDepth: 10,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.2,
		}
	}
	for i := range popts.Levels {
		// Bloom filters make lookups of absent keys (the committer checks
		// every written key; readers ask for missing keys) skip tables.
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		popts.Levels[i].Compression = tableCompression
	}
	db, err := pebble.Open(dir, popts)
	return db, engineErr(err)
}

// loadMeta reads the metadata, creating it for a new database.
func (s *Store) loadMeta() error {
	id, err := s.getMeta(metaDBID)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if s.opts.ReadOnly {
			return fmt.Errorf("%w: no database metadata", ErrCorrupt)
		}
		return s.create()
	case err != nil:
		return err
	case len(id) != len(s.dbid):
		return fmt.Errorf("%w: database id of %d bytes", ErrCorrupt, len(id))
	}
	copy(s.dbid[:], id)
	if !s.opts.DBID.IsZero() && s.opts.DBID != s.dbid {
		return fmt.Errorf("%w: store has %s, expected %s", ErrDBIDMismatch, s.dbid, s.opts.DBID)
	}
	f, err := s.getMeta(metaFormat)
	if err != nil || !knownFormat(f) {
		return fmt.Errorf("%w: unsupported storage format %v (want %d)", ErrCorrupt, f, formatVersion)
	}
	if f[0] != formatVersion && !s.opts.ReadOnly {
		if err := s.engineWrite(func() error { return s.db.Set(metaFormat, []byte{formatVersion}, pebble.Sync) }); err != nil {
			return fmt.Errorf("upgrade the storage format: %w", err)
		}
	}
	a, err := s.readApplied()
	if err != nil {
		return err
	}
	if err := s.reconcileRole(a.index); err != nil {
		return err
	}
	if s.px != nil {
		if _, err := s.readProxyRecord(); err != nil {
			return err
		}
	}
	s.appliedPos.Store(&a) // before the index, as in publish
	s.applied.Store(a.index)
	ri, err := s.readRaftApplied()
	if err != nil {
		return err
	}
	s.raftApplied.Store(ri)
	return nil
}

func (s *Store) create() error {
	s.dbid = s.opts.DBID
	if s.dbid.IsZero() {
		if _, err := io.ReadFull(rand.Reader, s.dbid[:]); err != nil {
			return err
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(metaDBID, s.dbid[:], nil)
	b.Set(metaFormat, []byte{formatVersion}, nil)
	b.Set(metaApplied, appliedRecord{}.encode(), nil)
	b.Set(metaLog, logRecord{first: 1}.encode(), nil)
	b.Set(metaStats, statsRecord{}.encode(), nil)
	b.Set(metaHistory, historyRecord{enabled: s.opts.historyEnabled()}.encode(), nil)
	if s.opts.Proxy != nil {
		b.Set(metaProxy, proxyRecord{}.encode(), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	s.opts.Logger.Info("created database", "db", s.opts.Name, "db_id", s.dbid.String(), "dir", s.opts.Dir)
	return nil
}

func (s *Store) getMeta(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

func (s *Store) readApplied() (appliedRecord, error) {
	v, err := s.getMeta(metaApplied)
	if err != nil {
		return appliedRecord{}, fmt.Errorf("read applied index: %w", err)
	}
	return decodeApplied(v)
}

// DBID returns the database id.
func (s *Store) DBID() DBID { return s.dbid }

// Name returns the database name.
func (s *Store) Name() string { return s.opts.Name }

// Options returns the options the store runs with (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// AppliedIndex is the index of the last durable entry.
func (s *Store) AppliedIndex() uint64 { return s.applied.Load() }

// Closed reports whether Close has begun: reads then fail with ErrClosed.
func (s *Store) Closed() bool { return s.closed.Load() }

// Head is the durable position of the database: the index, hash and time
// of the last applied entry, read at one point in time.
type Head struct {
	Index uint64
	Hash  wal.Hash
	Time  int64
}

// Head returns the durable position (zero for an empty database).
func (s *Store) Head() (Head, error) {
	if s.closed.Load() {
		return Head{}, ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	a, err := s.readApplied()
	if err != nil {
		return Head{}, err
	}
	return Head{Index: a.index, Hash: a.hash, Time: a.time}, nil
}

// AppliedTime is the root's clock in the last durable entry (zero if none).
func (s *Store) AppliedTime() time.Time {
	_, t := s.AppliedPosition()
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, t)
}

// AppliedPosition returns the index of the last durable entry and its
// time (root clock, Unix nanoseconds; 0 if none), read together: the time
// is that entry's, unlike AppliedIndex and AppliedTime called in turn.
func (s *Store) AppliedPosition() (index uint64, unixNanos int64) {
	a := s.appliedPos.Load()
	if a == nil {
		return 0, 0
	}
	return a.index, a.time
}

// Changed returns a channel closed when the applied index next moves.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.changed
}

// publish makes index visible to readers and waiters. Called by the
// committer only, after the entry is durable. The entry's position (with
// its time) is stored before its index: a reader that sees the index then
// finds that time or a later one, never the time of an older entry (or
// none).
func (s *Store) publish(a appliedRecord) {
	s.appliedPos.Store(&a)
	s.applied.Store(a.index)
	s.m.applied.Set(float64(a.index))
	s.mu.Lock()
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
	s.mu.Unlock()
}

// Close stops the committer (pending writes fail with ErrClosed) and closes
// the database. Views must be closed first.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.closed.Store(true)
	s.mu.Unlock()
	openStores.remove(s) // waits for GoHeapEngineBytes under way
	s.m.closing()        // and for a Metrics call
	close(s.quit)
	s.bg.Wait()
	<-s.stopped
	var err error
	if !s.opts.ReadOnly && s.segs != nil {
		// Pebble's unsynced tail would be replayed from the segments
		// after a power loss; after a clean stop there is none.
		err = s.engineWrite(func() error { return s.db.LogData(nil, pebble.Sync) })
	}
	err = errors.Join(err, s.db.Close())
	if s.segs != nil {
		err = errors.Join(err, s.segs.close())
	}
	return err
}

// DiskBytes is the size of the database on disk.
func (s *Store) DiskBytes() uint64 {
	if s.closed.Load() {
		return 0
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	n := s.db.Metrics().DiskSpaceUsage()
	if s.segs != nil {
		n += s.segs.diskBytes()
	}
	return n
}

// Stats are counters of the live data, kept exactly in every commit.
type Stats struct {
	Keys       int64
	KeyBytes   int64
	ValueBytes int64
	LogFirst   uint64
	LogBytes   int64
}

// Stats reads the current counters.
func (s *Store) Stats() (Stats, error) {
	if s.closed.Load() {
		return Stats{}, ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	get := func(k []byte) ([]byte, error) {
		v, c, err := snap.Get(k)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return append([]byte(nil), v...), nil
	}
	sv, err := get(metaStats)
	if err != nil {
		return Stats{}, err
	}
	st, err := decodeStats(sv)
	if err != nil {
		return Stats{}, err
	}
	lv, err := get(metaLog)
	if err != nil {
		return Stats{}, err
	}
	lr, err := decodeLogRecord(lv)
	if err != nil {
		return Stats{}, err
	}
	return Stats{Keys: st.keys, KeyBytes: st.keyBytes, ValueBytes: st.valueBytes, LogFirst: lr.first, LogBytes: lr.bytes}, nil
}

// DiskFull reports whether writes are being refused for lack of space.
func (s *Store) DiskFull() bool { return s.diskFull.Load() }

// ensureBallast creates the ballast file if it is missing and there is room
// for it above the free-space reserve.
func (s *Store) ensureBallast() {
	if s.opts.BallastBytes <= 0 {
		return
	}
	if st, err := s.opts.FS.Stat(s.ballast); err == nil && st.Size() == s.opts.BallastBytes {
		return
	}
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil || du.AvailBytes < s.opts.MinFreeBytes+uint64(s.opts.BallastBytes) {
		return
	}
	f, err := s.opts.FS.Create(s.ballast, vfs.WriteCategoryUnspecified)
	if err != nil {
		s.opts.Logger.Warn("cannot create ballast", "err", err)
		return
	}
	defer f.Close()
	zero := make([]byte, 1<<20)
	for left := s.opts.BallastBytes; left > 0; left -= int64(len(zero)) {
		if left < int64(len(zero)) {
			zero = zero[:left]
		}
		if _, err := f.Write(zero); err != nil {
			s.opts.Logger.Warn("cannot write ballast", "err", err)
			f.Close()
			s.opts.FS.Remove(s.ballast)
			return
		}
	}
	if err := f.Sync(); err != nil {
		s.opts.Logger.Warn("cannot sync ballast", "err", err)
	}
}

// releaseBallast runs inside Pebble when the disk returned ENOSPC: it frees
// the ballast so the write in flight can finish, and switches the store to
// refusing writes until space returns.
func (s *Store) releaseBallast() {
	s.diskFull.Store(true)
	s.m.diskFull.Set(1)
	s.m.diskFullEvents.Inc()
	if err := s.opts.FS.Remove(s.ballast); err != nil {
		s.opts.Logger.Error("disk full and no ballast to release", "err", err)
		return
	}
	s.opts.Logger.Error("disk full: released ballast; refusing writes until space returns", "db", s.opts.Name)
}

// pebbleLogger routes Pebble's messages to slog. Fatalf must not return:
// Pebble calls it when its state is undefined (a failed WAL write), and
// the only safe continuation is a restart from the durable state, which
// holds every acknowledged write.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("storage engine failed; exiting to restart from durable state", "err", fmt.Sprintf(format, args...))
	os.Exit(70)
}

// engineWrite runs f, a write to Pebble. Pebble writes its log in the
// background, and a write after that failed panics with the error: its
// state is undefined then, as when it calls Fatalf. Such a panic ends the
// process as Fatalf does (status 70), so that a restart recovers every
// acknowledged write from durable state; other panics go on.
func (s *Store) engineWrite(f func() error) error {
	defer func() {
		if r := recover(); r != nil {
			err, ok := r.(error)
			if _, bug := r.(runtime.Error); !ok || bug {
				panic(r)
			}
			pebbleLogger{s.opts.Logger}.Fatalf("%v", err)
		}
	}()
	return f()
}

// Compact compacts the whole database now, reclaiming the space of
// overwritten, evicted and deleted data at once instead of as background
// compactions get to it (benchmarks, and operators after bulk changes).
// Reads and writes go on meanwhile.
func (s *Store) Compact() error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	return engineErr(s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true))
}

// engineCompression is how Pebble compresses the blocks of its tables and
// blob files. Pebble's default (Snappy everywhere) spends CPU compressing
// every blob file block, and most of those are log blocks of large values
// that are either already compressed (zstd) or stored raw because values
// dominate them — random values do not compress. The adaptive profile
// tries Snappy on about one block in ten and on the others uses what those
// samples say pays: Snappy if it saves at least 10%, else no compression
// (the OtherBlocks setting, used also for index and metadata blocks,
// which are small). Compressible values still get compressed.
var engineCompression = &block.CompressionProfile{
	Name:                           "qs-adaptive-snappy",
	DataBlocks:                     block.SnappyCompression.DataBlocks,
	ValueBlocks:                    block.SnappyCompression.ValueBlocks,
	OtherBlocks:                    block.NoCompression.OtherBlocks,
	MinReductionPercent:            12,
	AdaptiveReductionCutoffPercent: 10,
}

func tableCompression() *block.CompressionProfile { return engineCompression }
