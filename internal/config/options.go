package config

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// WatchLimits returns the limits of the process's watch streams (zero
// fields: the watch package's defaults).
func (c *Config) WatchLimits() watch.Limits {
	return watch.Limits{MaxWatchers: c.WatchMaxWatchers, WriteRate: c.WatchWriteRate, WriteConcurrency: c.WatchWriteConcurrency,
		WakeDelayTarget: c.WatchWakeDelayTarget.Duration}
}

// Proxy log retention defaults: a proxy's log serves watchers resuming and
// nothing else, so it is kept short (the disk is what a proxy saves).
const (
	proxyRetainBytes = 16 << 20
	proxyRetainAge   = time.Hour
)

// StoreOptions converts a database's configuration to store options.
func (c *Config) StoreOptions(d Database) (store.Options, error) {
	comp, err := wal.ParseCompression(d.Compression)
	if err != nil {
		return store.Options{}, err
	}
	o := store.Options{
		Name:          d.Name,
		Dir:           filepath.Join(c.Data, d.Name),
		MaxKeyBytes:   d.MaxKeyBytes,
		MaxValueBytes: d.MaxValueBytes,
		MaxBatchOps:   d.MaxBatchOps,
		ChunkBytes:    d.ChunkBytes,
		BatchWindow:   d.BatchWindow.Duration,
		Compression:   comp,
		Retention: store.Retention{
			MaxEntries: d.RetainEntries, MaxBytes: d.RetainBytes, MaxAge: d.RetainAge.Duration,
		},
		MinFreeBytes:   d.MinFreeBytes,
		BallastBytes:   d.BallastBytes,
		CacheBytes:     d.CacheBytes,
		ReadCacheBytes: d.ReadCacheBytes,
		History:        store.HistoryOptions{Retention: d.HistoryRetention.Duration, MaxBytes: d.HistoryMaxBytes},
	}
	if d.IsProxy() {
		o.Proxy = &store.ProxyOptions{Window: d.ProxyWindow, CacheBytes: d.ProxyCacheBytes,
			SoftFreeBytes: d.ProxySoftFreeBytes, HardFreeBytes: d.ProxyHardFreeBytes, FetchTimeout: d.ProxyFetchTimeout.Duration,
			TransientBytes: d.ProxyTransientBytes, ShardCacheBytes: d.ProxyShardCacheBytes, NodeName: c.NodeName}
		if c.Shards > 0 {
			if o.Proxy.Shards, err = cache.NewShardMap(c.Shards); err != nil {
				return o, err
			}
		}
		if o.Retention.MaxEntries == 0 {
			o.Retention.MaxEntries = max(d.ProxyWindow, 10000)
		}
		if o.Retention.MaxBytes == 0 {
			o.Retention.MaxBytes = proxyRetainBytes
		}
		if o.Retention.MaxAge == 0 {
			o.Retention.MaxAge = proxyRetainAge
		}
	}
	if d.DBID != "" {
		if o.DBID, err = store.ParseDBID(d.DBID); err != nil {
			return o, err
		}
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return o, err
	}
	if p := o.Proxy; p != nil && p.HardFreeBytes < o.MinFreeBytes {
		return o, fmt.Errorf("proxy_hard_free_bytes %d below min_free_bytes %d: admissions must stop before writes do", p.HardFreeBytes, o.MinFreeBytes)
	}
	return o, nil
}
