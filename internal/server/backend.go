package server

import (
	"context"
	"fmt"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// memcacheBackend adapts a database to the memcached front door.
type memcacheBackend struct{ db *httpapi.Database }

func (b memcacheBackend) Get(keys [][]byte, found func(key, value []byte, index uint64)) (uint64, error) {
	for _, k := range keys {
		b.db.Reads.Observe(k)
	}
	return b.db.Store.Lookup(keys, func(_ uint64, i int, v []byte, idx uint64, ok bool) error {
		if ok {
			found(keys[i], v, idx)
		}
		return nil
	})
}

func (b memcacheBackend) write(ctx context.Context, op wal.Op) (uint64, bool, error) {
	if err := b.db.CanWrite(); err != nil {
		return 0, false, err
	}
	if err := b.db.Gate.RefuseMemcacheWrite(); err != nil {
		return 0, false, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	r, err := b.db.Write(ctx, storeBatch(op))
	return r.Index, r.Changed, err
}

func (b memcacheBackend) Set(ctx context.Context, key, value []byte) (uint64, error) {
	idx, _, err := b.write(ctx, wal.Op{Type: wal.OpSet, Key: key, Value: value})
	return idx, err
}

func (b memcacheBackend) Delete(ctx context.Context, key []byte) (uint64, bool, error) {
	return b.write(ctx, wal.Op{Type: wal.OpDelete, Key: key})
}

func (b memcacheBackend) Stats() [][2]string {
	s := b.db.Store
	role := "root"
	if b.db.CanWrite() != nil {
		role = "replica"
	}
	if b.db.Status != nil {
		if r, ok := b.db.Status()["role"].(string); ok {
			role = r
		}
	}
	return [][2]string{
		{"db", s.Name()},
		{"db_id", s.DBID().String()},
		{"role", role},
		{"applied_index", strconv.FormatUint(s.AppliedIndex(), 10)},
	}
}
