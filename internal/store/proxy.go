package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// A proxy store (Options.Proxy set) applies the whole log like a replica,
// through the same committer and the same hash-chain checks, but keeps
// only some values (docs/storage.md, "Proxy stores"):
//
//   - Every key has its value record, with the index that wrote it. A
//     value the proxy does not hold has a remote record instead: the
//     index, length and CRC of the value, but not the value. A key that
//     does not exist has no record, so negative lookups are answered from
//     the local data (bloom filters) without asking anyone.
//   - The sliding window: values written by the last Window entries are
//     always stored here. The committer writes a value that is already
//     outside the window when its entry is applied (a proxy catching up)
//     as a remote record at once, and never evicts a value inside it. So
//     a replica less than Window entries behind the proxy holds every
//     version the proxy may ask it for.
//   - The cache: values outside the window stay while the cache is within
//     CacheBytes and the disk above SoftFreeBytes of free space; beyond,
//     the least recently used (CLOCK: a reference bit per key hash, set by
//     reads, cleared by the sweeping hand) become remote records. A value
//     fetched for a reader is admitted back, unless free space is below
//     HardFreeBytes.
//   - The policy is internal/cache's, decided from plain inputs: the
//     window's floor (Window), how many bytes to give up (Limits), which
//     values the hand gives up (Clock.Sweep), when to compact what was
//     given up (Reclaim), the transient tier's admissions (Transient) and
//     the keys of this node's L2 shard (OwnShard). Here are its
//     mechanics: the records, the batches, and the committer requests.
//   - Admission and eviction are committer requests (reqCache) checked
//     against the key's current record: a change applies only if the
//     record still has the index the request saw, so a newer write is
//     never clobbered, and they change only where a value is stored, never
//     which version a reader sees.
//   - Reads (Lookup, View.Get, View.Scan) answer at one view index P. A
//     remote record of version I is fetched through the Fetcher from a
//     full replica (the version current at P), and checked against the
//     length and CRC the record holds before it is served.
//
// A proxy keeps no MVCC history and writes no in-log value records (its
// log is short; see the proxy retention defaults in internal/config).

// ProxyOptions configure a proxy store. A zero field means its default.
type ProxyOptions struct {
	// Window is the sliding window, in log entries: values written by the
	// last Window entries are never evicted. Default 10000.
	Window int64
	// CacheBytes is the budget of stored values (the window's included).
	// Default 1 GiB; negative: none (keep only the window).
	CacheBytes int64
	// SoftFreeBytes: while the disk has less free space, values are
	// evicted beyond the budget. Default 1 GiB.
	SoftFreeBytes uint64
	// HardFreeBytes: while the disk has less free space, fetched values
	// are not admitted. Default 512 MiB.
	HardFreeBytes uint64
	// FetchTimeout bounds getting the remote values of one read.
	// Default 5s.
	FetchTimeout time.Duration
	// EvictInterval is how often the cache is checked against its limits.
	// Default 100ms.
	EvictInterval time.Duration
	// TransientBytes is the in-memory tier in front of the cache: fetched
	// values are held there and stored only when read again while held
	// (internal/cache, Transient). Default 0: none, every fetched value
	// is stored.
	TransientBytes int64
	// ShardCacheBytes is the budget of the values of this node's own
	// shard of its data centre's L2 cache (Shards, NodeName): filled from its
	// fetches and the prefetch stream, read by this node and served to
	// the other nodes of its data centre (ShardValue). Default 0: none.
	ShardCacheBytes int64
	// Shards is the shard map of this node's data centre, and NodeName
	// this node's name in it: the node's own shard is Shards.OfNode
	// (NodeName). No name: no key is of this node's shard.
	Shards   cache.ShardMap
	NodeName string
}

func (p *ProxyOptions) ensureDefaults() {
	if p.Window == 0 {
		p.Window = 10000
	}
	if p.CacheBytes == 0 {
		p.CacheBytes = 1 << 30
	}
	if p.SoftFreeBytes == 0 {
		p.SoftFreeBytes = 1 << 30
	}
	if p.HardFreeBytes == 0 {
		p.HardFreeBytes = 512 << 20
	}
	if p.FetchTimeout == 0 {
		p.FetchTimeout = 5 * time.Second
	}
	if p.EvictInterval == 0 {
		p.EvictInterval = 100 * time.Millisecond
	}
}

func (p *ProxyOptions) withDefaults() *ProxyOptions {
	p.ensureDefaults()
	return p
}

func (p *ProxyOptions) validate() error {
	switch {
	case p.Window < 1:
		return fmt.Errorf("store: proxy window %d below 1 entry", p.Window)
	case p.HardFreeBytes > p.SoftFreeBytes:
		return fmt.Errorf("store: proxy hard free-space limit %d above the soft limit %d", p.HardFreeBytes, p.SoftFreeBytes)
	case p.FetchTimeout < time.Millisecond:
		return fmt.Errorf("store: proxy fetch timeout %v below 1ms", p.FetchTimeout)
	case p.EvictInterval < time.Millisecond:
		return fmt.Errorf("store: proxy evict interval %v below 1ms", p.EvictInterval)
	case p.TransientBytes < 0:
		return fmt.Errorf("store: proxy transient tier of %d bytes below 0", p.TransientBytes)
	case p.ShardCacheBytes < 0:
		return fmt.Errorf("store: proxy shard cache of %d bytes below 0", p.ShardCacheBytes)
	}
	return nil
}

// Fetcher gets, from full replicas, the values a proxy store does not hold.
type Fetcher interface {
	// Fetch sets the Value of every item to the value of Key written at
	// Index, which was the key's version at index asOf, checked against
	// Len and CRC. It returns an error if any item could not be fetched;
	// it must not keep the items.
	Fetch(ctx context.Context, asOf uint64, items []FetchItem) error
}

// FetchItem is one value a proxy read needs from a replica.
type FetchItem struct {
	Key   []byte
	Index uint64 // the version: the index of the write that set it
	Len   int
	CRC   uint32 // CRC-32C (Castagnoli) of the value
	// Digest is ValueDigestOf the value, when HasDigest (records written
	// by proxies of earlier versions have none).
	Digest    ValueDigest
	HasDigest bool
	Value     []byte // set by Fetch
}

// fetchItem describes the value of key that the remote record rec names.
func fetchItem(key []byte, rec record) FetchItem {
	return FetchItem{Key: key, Index: rec.index, Len: rec.valueLen, CRC: rec.valueCRC, Digest: rec.digest, HasDigest: rec.hasDigest}
}

// Check reports whether value is the one the item describes: its length,
// CRC and, when the item has one, digest.
func (it *FetchItem) Check(value []byte) bool {
	return len(value) == it.Len && crc(value) == it.CRC && (!it.HasDigest || ValueDigestOf(value) == it.Digest)
}

// IsProxy reports whether the store is a proxy.
func (s *Store) IsProxy() bool { return s.px != nil }

// SetFetcher gives a proxy store the fetcher of its missing values. Reads
// of values the proxy does not hold fail with ErrUnavailable until then.
func (s *Store) SetFetcher(f Fetcher) {
	if s.px != nil {
		s.px.fetcher.Store(&f)
	}
}

// ProxyStats are the counters of a proxy store's cache.
type ProxyStats struct {
	CachedValues int64 // values stored here (window included)
	CachedBytes  int64
	CacheBytes   int64 // the budget
	Window       int64 // the sliding window, in entries
	SoftLimited  bool  // free disk below the soft limit: evicting
	HardLimited  bool  // free disk below the hard limit: not admitting
	Full         bool  // over the budget with nothing more to evict: not admitting
	// The transient tier: values held in memory, their bytes, the budget.
	TransientValues, TransientBytes, TransientBudget int64
	// The shard budget (values of this node's L2 shard): values held,
	// their bytes, the budget; values served to other nodes (L2 hits
	// answered) and the L2 requests it could not answer.
	ShardValues, ShardBytes, ShardBudget int64
	ShardServed, ShardMissed             int64
	// Since the store opened: values read here (hits), fetched from
	// elsewhere, and written to the cache after a fetch (admissions).
	Hits, Fetched, Admitted int64
}

// ProxyStats returns the cache counters (zero for a full node).
func (s *Store) ProxyStats() ProxyStats {
	p := s.px
	if p == nil {
		return ProxyStats{}
	}
	ts := p.transient.Stats()
	ss := p.shard.Stats()
	return ProxyStats{CachedValues: p.cachedValues.Load(), CachedBytes: p.cachedBytes.Load(),
		CacheBytes: p.budget(), Window: p.opts.Window,
		SoftLimited: p.softLimited.Load(), HardLimited: p.hardLimited.Load(), Full: p.full.Load(),
		TransientValues: ts.Values, TransientBytes: ts.Bytes, TransientBudget: p.opts.TransientBytes,
		ShardValues: ss.Values, ShardBytes: ss.Bytes, ShardBudget: ss.Budget,
		ShardServed: p.shardServed.Load(), ShardMissed: p.shardMissed.Load(),
		Hits: p.hits.Load(), Fetched: p.fetched.Load(), Admitted: p.admitted.Load()}
}

// proxyRecord (mproxy) counts the values a proxy stores. Its presence
// marks the store's data as a proxy's.
type proxyRecord struct {
	values int64
	bytes  int64
}

func (p proxyRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(p.values))
	return binary.BigEndian.AppendUint64(b, uint64(p.bytes))
}

func decodeProxyRecord(b []byte) (proxyRecord, error) {
	if len(b) != 16 {
		return proxyRecord{}, fmt.Errorf("%w: proxy record of %d bytes", ErrCorrupt, len(b))
	}
	return proxyRecord{values: int64(binary.BigEndian.Uint64(b)), bytes: int64(binary.BigEndian.Uint64(b[8:]))}, nil
}

// proxyState is what the readers, the committer and the cache keeper of a
// proxy store share. The cache's policy (the window, reference bits and
// hand, limits, the admission queue, the tiers, the own shard) is
// internal/cache's; the records it acts on are here.
type proxyState struct {
	opts    ProxyOptions
	fetcher atomic.Pointer[Fetcher]

	window    cache.Window
	limits    cache.Limits
	clock     *cache.Clock
	admits    *cache.Queue[admission]
	transient *cache.Transient
	shard     *cache.ShardCache // values of this node's L2 shard
	own       cache.OwnShard    // the keys of this node's L2 shard

	// l1Hit and l1Miss are the store's tier-lookup counters of this
	// proxy's own store, resolved once: they are counted on every read.
	l1Hit, l1Miss *counter

	cachedValues, cachedBytes atomic.Int64
	softLimited, hardLimited  atomic.Bool
	// full: the hand's last whole turn left the cache over its budget,
	// so what it stores is the window's, or was read since the hand
	// passed. A fetched value would be given up again at once, after a
	// disk write and a walk over every record to find it: it is not
	// admitted until a sweep frees what it needs or the cache is within
	// its budget (a budget below zero keeps only the window for good).
	full atomic.Bool
	// Since open: values served from here, values fetched, values
	// written to the cache by admissions.
	hits, fetched, admitted atomic.Int64
	// Since open: L2 requests of other nodes answered, and not.
	shardServed, shardMissed atomic.Int64
	// logDropped counts the log bytes retention dropped since the keeper
	// last compacted the log's keyspace.
	logDropped atomic.Int64
}

type admission struct {
	key   []byte
	index uint64
	value []byte
}

type eviction struct {
	key   []byte
	index uint64
}

// cacheChange is the payload of a reqCache request.
type cacheChange struct {
	admit []admission
	evict []eviction
	// Results, set by the committer.
	admitted, evicted, stale int
	evictedBytes             int64
}

// admitQueue bounds the fetched values waiting for the keeper.
const admitQueue = 1024

func newProxyState(o ProxyOptions, m *storeMetrics) *proxyState {
	return &proxyState{opts: o,
		l1Hit: m.pxTiers.WithLabelValues(TierResult{"l1", "hit"}), l1Miss: m.pxTiers.WithLabelValues(TierResult{"l1", "miss"}),
		window: cache.Window(o.Window),
		limits: cache.Limits{Budget: o.CacheBytes, SoftFree: o.SoftFreeBytes, HardFree: o.HardFreeBytes},
		clock:  cache.NewClock(), admits: cache.NewQueue[admission](admitQueue),
		transient: cache.NewTransient(o.TransientBytes, o.CacheBytes), shard: cache.NewShardCache(o.ShardCacheBytes),
		own: o.Shards.Own(o.NodeName)}
}

// ownsShard reports whether the shard budget keeps key.
func (p *proxyState) ownsShard(key []byte) bool {
	return p.shard.Enabled() && p.own.Keeps(key)
}

// budget is the value bytes the cache may hold.
func (p *proxyState) budget() int64 { return p.limits.Bytes() }

// floor is the highest index outside the window when last is applied:
// values written at or below it may be remote.
func (p *proxyState) floor(last uint64) uint64 { return p.window.Floor(last) }

// admit queues a fetched value for the cache; it never blocks a reader.
func (p *proxyState) admit(m *storeMetrics, a admission) {
	if p.full.Load() {
		m.pxAdmissions.WithLabelValues("refused_full").Inc()
		return
	}
	if !p.admits.Offer(a) {
		m.pxAdmissions.WithLabelValues("dropped").Inc()
	}
}

// readProxyRecord reads the proxy counters and publishes them.
func (s *Store) readProxyRecord() (proxyRecord, error) {
	v, err := s.getMeta(metaProxy)
	if err != nil {
		return proxyRecord{}, fmt.Errorf("read proxy record: %w", err)
	}
	r, err := decodeProxyRecord(v)
	if err != nil {
		return r, err
	}
	s.px.cachedValues.Store(r.values)
	s.px.cachedBytes.Store(r.bytes)
	return r, nil
}

// proxyWriter is the committer's state of a proxy's cache: the proxy
// state, the cache counters as the group changes them, and the window's
// floor for the entries being applied. Its state is nil on a full node.
type proxyWriter struct {
	state       *proxyState
	stats       proxyRecord
	dirty       bool   // the group changed stats
	windowFloor uint64 // values written at or below it are stored remote
}

// newProxyWriter loads a proxy's cache counters (nothing on a full node).
func newProxyWriter(s *Store) (proxyWriter, error) {
	w := proxyWriter{state: s.px}
	if w.state == nil {
		return w, nil
	}
	var err error
	w.stats, err = s.readProxyRecord()
	return w, err
}

// add counts a value of n bytes into the cache.
func (w *proxyWriter) add(n int) {
	w.stats.values++
	w.stats.bytes += int64(n)
	w.dirty = true
}

// forget uncounts the stored value ks describes, being replaced. A
// corrupt record counts as what it held read ignoring its CRC (salvage).
func (w *proxyWriter) forget(ks *keyState) {
	if !ks.exists || ks.remote {
		return
	}
	w.stats.values--
	w.stats.bytes -= int64(ks.valueLen)
	w.dirty = true
}

// write puts the cache counters in b if the group changed them.
func (w *proxyWriter) write(b *pebble.Batch) {
	if w.dirty {
		b.Set(metaProxy, w.stats.encode(), nil)
	}
}

// publish exports the committed cache counters, last being the applied
// index and logDropped the log bytes the group's retention dropped, and
// wakes the keeper when the cache is over budget.
func (w *proxyWriter) publish(m *storeMetrics, last uint64, logDropped int64) {
	p := w.state
	p.logDropped.Add(logDropped)
	p.cachedValues.Store(w.stats.values)
	p.cachedBytes.Store(w.stats.bytes)
	m.pxCachedValues.Set(float64(w.stats.values))
	m.pxCachedBytes.Set(float64(w.stats.bytes))
	m.pxWindowEntries.Set(float64(p.window.Entries(last)))
	if p.limits.Over(w.stats.bytes) {
		p.admits.Kick()
	}
}

// proxySet writes the record of a set on a proxy: the value inside the
// window, a remote record outside it. It keeps the cached counters.
func (c *committer) proxySet(op wal.Op, index uint64, ks *keyState) (chunks int, remote bool) {
	c.px.forget(ks)
	if index <= c.px.windowFloor {
		d := ValueDigestOf(op.Value)
		c.g.buf = encodeRemote(c.g.buf, index, attrsOf(op), len(op.Value), crc(op.Value), &d)
		c.g.batch.Set(c.g.kbuf, c.g.buf, nil)
		return 0, true
	}
	c.px.add(len(op.Value))
	return c.writeValue(op.Key, index, attrsOf(op), op.Value), false
}

// prepareCache applies admissions and evictions that still fit the key's
// current record.
func (c *committer) prepareCache(r *request) error {
	ch := r.cache
	for _, a := range ch.admit {
		ks, err := c.state(a.key)
		if err != nil {
			return err
		}
		if !ks.exists || !ks.remote || ks.corrupt || ks.index != a.index || len(a.value) != ks.valueLen || crc(a.value) != ks.valueCRC ||
			ks.hasDigest && ValueDigestOf(a.value) != ks.digest {
			ch.stale++
			continue
		}
		c.g.kbuf = dataKey(c.g.kbuf, a.key)
		n := c.writeValue(a.key, a.index, ks.attrs, a.value)
		*ks = keyState{exists: true, index: a.index, attrs: ks.attrs, value: a.value, valueLen: len(a.value), valueCRC: ks.valueCRC, chunks: n}
		c.px.add(len(a.value))
		ch.admitted++
	}
	floor := c.px.state.floor(c.last.index)
	for _, e := range ch.evict {
		ks, err := c.state(e.key)
		if err != nil {
			return err
		}
		if !ks.exists || ks.remote || ks.corrupt || ks.index != e.index || ks.index > floor {
			ch.stale++
			continue
		}
		sum := ks.valueCRC
		if ks.chunks == 0 && ks.logRec == nil {
			sum = crc(ks.value)
		}
		digest := c.storedDigest(e.key, ks)
		// A value in a retired log block (a full node's data become a
		// proxy's) no longer lives there: count the block down.
		if err := c.release(ks); err != nil {
			return err
		}
		c.g.kbuf = dataKey(c.g.kbuf, e.key)
		c.g.buf = encodeRemote(c.g.buf, ks.index, ks.attrs, ks.valueLen, sum, digest)
		c.g.batch.Set(c.g.kbuf, c.g.buf, nil)
		for i := 0; i < ks.chunks; i++ {
			c.g.batch.Delete(chunkKey(nil, e.key, uint32(i)), nil)
		}
		c.px.forget(ks)
		*ks = keyState{exists: true, index: ks.index, attrs: ks.attrs, valueLen: ks.valueLen, valueCRC: sum, remote: true}
		if digest != nil {
			ks.digest, ks.hasDigest = *digest, true
		}
		ch.evicted++
		ch.evictedBytes += int64(ks.valueLen)
	}
	return nil
}

// writeRoleMeta adds the history and proxy records to the batch if the
// group changed them, and settles the retired log blocks evictions
// counted down in a group that wrote no entry (groups with entries settle
// them with their block).
func (c *committer) writeRoleMeta() error {
	if c.g.blk.Len() == 0 && len(c.g.touched) > 0 {
		if err := c.settleRetired(); err != nil {
			return err
		}
		c.ret.writeTotals(c.g.batch)
	}
	c.hw.write(c.g.batch)
	c.px.write(c.g.batch)
	return nil
}

// publishRoleMeta exports the committed history and proxy counters.
func (c *committer) publishRoleMeta() {
	c.hw.publish(c.s.m)
	c.place.publish(c)
}

// reconcileRole makes the stored data fit the configured role, at open:
// a proxy's data cannot serve as a full node; a full node's data becomes
// a proxy's (every value stored, to be evicted down to the budget), and
// loses its history; the history is started (with the applied index as
// horizon) or dropped to follow the options.
func (s *Store) reconcileRole(applied uint64) error {
	var pr, hr []byte
	var err error
	if pr, err = s.getMeta(metaProxy); err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	if hr, err = s.getMeta(metaHistory); err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	if s.opts.ReadOnly {
		// Tools (qs verify) open any database; a proxy's remote values
		// then read as unavailable.
		if pr != nil && s.px == nil {
			s.px = newProxyState(*(&ProxyOptions{}).withDefaults(), s.m)
		}
		return nil
	}
	if pr != nil && s.opts.Proxy == nil {
		return fmt.Errorf("%w: the database holds a proxy's partial data and cannot serve as a full node; remove its directory to make it a replica", ErrRoleMismatch)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if pr == nil && s.opts.Proxy != nil {
		sv, err := s.getMeta(metaStats)
		if err != nil {
			return err
		}
		st, err := decodeStats(sv)
		if err != nil {
			return err
		}
		b.Set(metaProxy, proxyRecord{values: st.keys, bytes: st.valueBytes}.encode(), nil)
		s.opts.Logger.Info("database becomes a proxy; values beyond the cache budget will be evicted", "db", s.opts.Name, "values", st.keys, "bytes", st.valueBytes)
	}
	want := s.opts.historyEnabled()
	var h historyRecord
	if hr != nil {
		if h, err = decodeHistoryRecord(hr); err != nil {
			return err
		}
	}
	if hr == nil || h.enabled != want {
		if !want {
			b.DeleteRange([]byte{prefixHistory}, []byte{prefixHistory + 1}, nil)
			b.Set(metaRetiredRecount, nil, nil) // the versions counted in retired blocks are gone
		}
		b.Set(metaHistory, historyRecord{enabled: want, horizon: applied}.encode(), nil)
		if hr != nil {
			s.opts.Logger.Info("MVCC history switched", "db", s.opts.Name, "enabled", want, "horizon", applied)
		}
	}
	if b.Empty() {
		return nil
	}
	return s.engineWrite(func() error { return b.Commit(pebble.Sync) })
}
