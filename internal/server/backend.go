package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/api/memcache"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// memcacheMetrics counts for the memcached doors of every database of the
// process (and of every Server, where a test runs several in one process).
var memcacheMetrics = metrics.MustRegister(memcache.NewMetrics())

// memcacheBackend adapts a database to the memcached front door.
type memcacheBackend struct {
	db       *service.Database
	flushAll bool // the database allows flush_all (memcache_flush_all)
}

func (b memcacheBackend) Get(keys [][]byte, found func(key, value []byte, index uint64, a memcache.Attrs)) (uint64, error) {
	for _, k := range keys {
		b.db.Reads.Observe(k)
	}
	return b.db.Store.LookupItems(keys, func(_ uint64, i int, it store.Item, ok bool) error {
		if ok {
			found(keys[i], it.Value, it.Index, memcache.Attrs{Flags: it.Flags, Expires: it.Expires})
		}
		return nil
	})
}

func (b memcacheBackend) write(ctx context.Context, op wal.Op, conds ...store.Cond) (uint64, bool, error) {
	if err := b.Writable(); err != nil {
		return 0, false, err
	}
	batch := storeBatch(op)
	batch.Conds = conds
	r, err := b.db.Write(ctx, batch)
	return r.Index, r.Changed, err
}

func (b memcacheBackend) Set(ctx context.Context, key, value []byte, a memcache.Attrs) (uint64, error) {
	idx, _, err := b.write(ctx, wal.Op{Type: wal.OpSet, Key: key, Value: value, Flags: a.Flags, Expires: a.Expires})
	return idx, err
}

func (b memcacheBackend) Delete(ctx context.Context, key []byte) (uint64, bool, error) {
	return b.write(ctx, wal.Op{Type: wal.OpDelete, Key: key})
}

func (b memcacheBackend) Writable() error {
	if err := b.db.CanWrite(); err != nil {
		return err
	}
	if err := b.db.Gate.RefuseMemcacheWrite(); err != nil {
		return fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	return nil
}

func (b memcacheBackend) WriteIf(ctx context.Context, key, value []byte, a memcache.Attrs, del bool, ifIndex uint64) (uint64, error) {
	op := wal.Op{Type: wal.OpSet, Key: key, Value: value, Flags: a.Flags, Expires: a.Expires}
	if del {
		op = wal.Op{Type: wal.OpDelete, Key: key}
	}
	idx, _, err := b.write(ctx, op, store.Cond{Key: key, Index: ifIndex})
	return idx, err
}

// FlushAll deletes every key in one batch, conditioned on each key's
// index at the read it was listed from: a key written in between makes the
// batch fail (and the flush start again), so that no write acknowledged
// before the flush survives it. A database with more keys than a batch may
// hold (max_batch_ops) cannot be flushed.
func (b memcacheBackend) FlushAll(ctx context.Context) (uint64, error) {
	if err := b.Writable(); err != nil {
		return 0, err
	}
	if !b.flushAll {
		return 0, fmt.Errorf("%w: flush_all is off for this database (memcache_flush_all = false)", store.ErrInvalid)
	}
	limit := b.db.Store.Options().MaxBatchOps
	for range 8 {
		batch, err := b.flushBatch(limit)
		if err != nil {
			return 0, err
		}
		if len(batch.Ops) == 0 {
			return b.db.Store.AppliedIndex(), nil
		}
		r, err := b.db.Write(ctx, batch)
		if !errors.Is(err, store.ErrConditionFailed) {
			return r.Index, err
		}
	}
	return 0, fmt.Errorf("%w: flush_all: keys kept changing while the flush was prepared", store.ErrUnavailable)
}

// flushBatch lists every key and returns the batch deleting them all.
func (b memcacheBackend) flushBatch(limit int) (store.Batch, error) {
	v, err := b.db.Store.View()
	if err != nil {
		return store.Batch{}, err
	}
	defer v.Close()
	var batch store.Batch
	_, err = v.Scan(nil, nil, limit+1, func(key, _ []byte, index uint64) error {
		k := bytes.Clone(key)
		batch.Ops = append(batch.Ops, wal.Op{Type: wal.OpDelete, Key: k})
		batch.Conds = append(batch.Conds, store.Cond{Key: k, Index: index})
		return nil
	})
	if err == nil && len(batch.Ops) > limit {
		err = fmt.Errorf("%w: flush_all: the database holds more than %d keys, the most one entry may delete (max_batch_ops)", store.ErrTooLarge, limit)
	}
	return batch, err
}

func (b memcacheBackend) Stats() [][2]string {
	s := b.db.Store
	return [][2]string{
		{"db", s.Name()},
		{"db_id", s.DBID().String()},
		{"role", b.db.Role()},
		{"applied_index", strconv.FormatUint(s.AppliedIndex(), 10)},
	}
}
