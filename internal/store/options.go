package store

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Options configure one database. The zero value of every field means its
// default, filled in by EnsureDefaults.
type Options struct {
	// Name labels the database in metrics and logs. Default "default".
	Name string
	// Dir is the database directory. Required.
	Dir string
	// FS is the filesystem. Default vfs.Default; tests inject faults here.
	FS vfs.FS
	// DBID is the id given to a new database. Default: random. Opening an
	// existing database with a different non-zero DBID fails with
	// ErrDBIDMismatch.
	DBID DBID
	// ReadOnly opens without writing anything (for qs verify).
	ReadOnly bool

	// MaxKeyBytes is the longest key accepted. Default 4096.
	MaxKeyBytes int
	// MaxValueBytes is the largest value accepted. Default 32 MiB.
	MaxValueBytes int
	// MaxBatchOps is the most operations in one atomic batch. Default 10000.
	MaxBatchOps int
	// MaxBatchBytes is the largest atomic batch (keys+values). Default 64 MiB.
	MaxBatchBytes int
	// ChunkBytes is the chunk size of large values; values longer than it
	// are stored in chunks. Default 256 KiB.
	ChunkBytes int

	// BatchWindow is how long the committer waits to gather more writes
	// after the first one of a group. Default 0: a lone write commits at once
	// and writes arriving during an fsync join the next commit.
	BatchWindow time.Duration
	// ReadCacheBytes is the budget of the in-memory read cache (see
	// cache.go). Default 64 MiB; negative disables it.
	ReadCacheBytes int64
	// IdempotencyWindow is how long the outcome of a batch with an ID is
	// remembered (see Batch.ID). Default 10m.
	IdempotencyWindow time.Duration
	// MaxGroupBytes caps the bytes committed in one durable commit.
	// Default 16 MiB.
	MaxGroupBytes int
	// Compression of log blocks. The zero value stores them uncompressed;
	// the configuration default (config.Database.Compression) is zstd.
	Compression wal.Compression

	// Retention bounds the log. Entries are removed oldest first while any
	// limit is exceeded; the newest block is always kept.
	Retention Retention

	// History bounds the MVCC history of overwritten and deleted values
	// that full nodes keep for proxies (history.go). Proxies keep none.
	History HistoryOptions
	// Proxy, when set, makes the store a proxy: it applies the whole log
	// but keeps values only in its sliding window and its cache, and
	// fetches the others from full replicas (proxy.go).
	Proxy *ProxyOptions

	// MinFreeBytes is the free disk space below which writes are refused
	// with ErrDiskFull. Default 256 MiB.
	MinFreeBytes uint64
	// BallastBytes is the size of a ballast file released if the disk fills
	// up anyway, so the storage engine can finish the write in flight.
	// Default 64 MiB; negative disables it.
	BallastBytes int64

	// CacheBytes is the block cache size. Pebble charges its memtables
	// (up to 2 × 16 MiB) to it, so it must be well above 32 MiB.
	// Default 256 MiB.
	CacheBytes int64

	// Logger receives store events. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock stamped on entries. Default time.Now.
	Now func() time.Time
	// Elapsed is real time since a fixed point, unmoved by changes of
	// the wall clock; a root bounds its stamps by it (rootclock.go).
	// Default: Go's monotonic clock, or, when only Now is given, Now's
	// own time (its readings are then taken as they are).
	Elapsed func() time.Duration

	// For tests: the size of a log segment (default 64 MiB), how often
	// unreferenced segments are looked for (default every second), and
	// keeping every block in Pebble (as Raft and proxy stores do).
	segmentBytes   int64
	collectEvery   time.Duration
	blocksInPebble bool
	// recycleAnyway recycles removed segments and writes spares on a
	// filesystem that cannot say a file's link count or free space (the
	// in-memory ones of the crash tests).
	recycleAnyway bool
}

// Retention limits the retained log. A zero field means its default; a
// negative one means no limit of that kind.
type Retention struct {
	// MaxEntries default 1,000,000.
	MaxEntries int64
	// MaxBytes default 1 GiB.
	MaxBytes int64
	// MaxAge: a block is dropped once its last entry is dated this long
	// before the log's newest entry (the log's clock, never local time).
	// Default 24h.
	MaxAge time.Duration
}

// HistoryOptions bound the MVCC history. A zero field means its default.
type HistoryOptions struct {
	// Retention: versions are kept at least this long after they stopped
	// being current, by the log's clock. Default 2h; negative disables
	// the history.
	Retention time.Duration
	// MaxBytes caps the history's stored bytes; the oldest versions go
	// first (the horizon rises sooner). Default 1 GiB; negative: no cap.
	MaxBytes int64
}

// EnsureDefaults fills zero fields with their defaults and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.Name == "" {
		o.Name = "default"
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = 4096
	}
	if o.ReadCacheBytes == 0 {
		o.ReadCacheBytes = 64 << 20
	}
	if o.IdempotencyWindow == 0 {
		o.IdempotencyWindow = 10 * time.Minute
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = 32 << 20
	}
	if o.MaxBatchOps == 0 {
		o.MaxBatchOps = 10000
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = 64 << 20
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = 256 << 10
	}
	if o.MaxGroupBytes == 0 {
		o.MaxGroupBytes = 16 << 20
	}
	if o.Retention.MaxEntries == 0 {
		o.Retention.MaxEntries = 1_000_000
	}
	if o.Retention.MaxBytes == 0 {
		o.Retention.MaxBytes = 1 << 30
	}
	if o.Retention.MaxAge == 0 {
		o.Retention.MaxAge = 24 * time.Hour
	}
	if o.History.Retention == 0 {
		o.History.Retention = 2 * time.Hour
	}
	if o.History.MaxBytes == 0 {
		o.History.MaxBytes = 1 << 30
	}
	if o.Proxy != nil {
		o.Proxy.ensureDefaults()
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 256 << 20
	}
	if o.BallastBytes == 0 {
		o.BallastBytes = 64 << 20
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 256 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Elapsed == nil && o.Now != nil {
		now := o.Now
		o.Elapsed = func() time.Duration { return time.Duration(now().UnixNano()) }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Elapsed == nil {
		o.Elapsed = func() time.Duration { return time.Since(processStart) }
	}
	return o
}

// processStart is the fixed point of the default Elapsed.
var processStart = time.Now()

// Validate reports the first invalid field.
func (o *Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("store: Dir is required")
	case o.MaxKeyBytes < 1 || o.MaxKeyBytes > wal.MaxKeyLen:
		return fmt.Errorf("store: MaxKeyBytes %d out of range 1..%d", o.MaxKeyBytes, wal.MaxKeyLen)
	case o.MaxValueBytes < 1 || o.MaxValueBytes > wal.MaxValueLen:
		return fmt.Errorf("store: MaxValueBytes %d out of range 1..%d", o.MaxValueBytes, wal.MaxValueLen)
	case o.MaxBatchOps < 1 || o.MaxBatchOps > wal.MaxOps:
		return fmt.Errorf("store: MaxBatchOps %d out of range 1..%d", o.MaxBatchOps, wal.MaxOps)
	case o.MaxBatchBytes < o.MaxValueBytes:
		return fmt.Errorf("store: MaxBatchBytes %d is below MaxValueBytes %d", o.MaxBatchBytes, o.MaxValueBytes)
	case o.ChunkBytes < 1024:
		return fmt.Errorf("store: ChunkBytes %d below 1024", o.ChunkBytes)
	case o.IdempotencyWindow < time.Second:
		return errors.New("store: IdempotencyWindow below 1s")
	case o.BatchWindow < 0 || o.BatchWindow > 5*time.Second:
		return fmt.Errorf("store: BatchWindow %v out of range 0..5s", o.BatchWindow)
	case o.CacheBytes < 64<<20:
		return fmt.Errorf("store: CacheBytes %d below 64 MiB (memtables are charged to it)", o.CacheBytes)
	case o.Compression > wal.CompressSnappy:
		return fmt.Errorf("store: unknown compression %d", o.Compression)
	}
	if o.Proxy != nil {
		return o.Proxy.validate()
	}
	return nil
}

// historyEnabled reports whether the store keeps MVCC history.
func (o *Options) historyEnabled() bool { return o.Proxy == nil && o.History.Retention > 0 }
