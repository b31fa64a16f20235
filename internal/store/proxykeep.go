package store

import (
	"context"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
)

// The cache keeper of a proxy store: one goroutine, owned by the store,
// that turns the readers' admissions and the cache's limits into committer
// requests. Everything it decides is checked again by the committer
// against the key's record at commit time (prepareCache).

const (
	// maxAdmitBatch and maxEvictBatch bound one cache request.
	maxAdmitBatch = 1024
	maxEvictBatch = 4096
	// maxSweep bounds the records one eviction round looks at, and
	// maxRounds the rounds of one tick.
	maxSweep  = 20000
	maxRounds = 8
	// compactAfter: once this many value bytes were evicted, the key range
	// they span is compacted (and once this many log bytes were dropped,
	// the log's keyspace). An eviction rewrites a record in place; its old
	// value keeps taking disk until a compaction rewrites its file, and
	// nothing else would trigger one in a cold range.
	compactAfter = 64 << 20
)

func (s *Store) keepProxyCache() {
	defer s.bg.Done()
	p := s.px
	t := time.NewTicker(p.opts.EvictInterval)
	defer t.Stop()
	var hand []byte // the CLOCK hand: the key to sweep from
	var lastSoft time.Time
	pace := cache.NewPacer(p.opts.EvictInterval)
	// The evicted bytes and key range since the last compaction.
	var evicted int64
	var lo, hi []byte
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.checkProxyDisk()
		case <-p.admits.Woken():
		}
		if admits := p.admits.Drain(nil, maxAdmitBatch); len(admits) > 0 {
			if p.hardLimited.Load() {
				s.m.pxAdmissions.WithLabelValues("refused_hard_limit").Add(float64(len(admits)))
			} else {
				s.submitCache(&cacheChange{admit: admits})
			}
		}
		if p.logDropped.Load() >= compactAfter {
			// The log a proxy applies passes through its tables, and
			// retention drops it with range deletions: give it back too.
			p.logDropped.Store(0)
			s.compactRange([]byte{prefixLog}, []byte{prefixLog + 1})
		}
		now := time.Now()
		need, step := p.limits.Need(p.cachedBytes.Load(), p.softLimited.Load(), now.Sub(lastSoft))
		if step {
			lastSoft = now
		}
		if need <= 0 || pace.Idle(now, s.applied.Load()) {
			continue
		}
		rounds := pace.Rounds(maxRounds)
		for round := 0; round < rounds && need > 0; round++ {
			victims, next, cycled := s.sweep(hand, need)
			hand = next
			if len(victims) > 0 {
				pace.Found()
				ch := &cacheChange{evict: victims}
				s.submitCache(ch)
				need -= ch.evictedBytes
				evicted += ch.evictedBytes
				for _, v := range victims {
					if lo == nil || string(v.key) < string(lo) {
						lo = v.key
					}
					if hi == nil || string(v.key) > string(hi) {
						hi = v.key
					}
				}
				if evicted >= compactAfter {
					s.compactEvicted(lo, hi)
					evicted, lo, hi = 0, nil, nil
				}
			}
			if cycled {
				pace.Cycled(now, s.applied.Load())
				break
			}
		}
	}
}

// compactEvicted compacts the value records from lo to hi, so that the
// space of the values evicted there comes back now.
func (s *Store) compactEvicted(lo, hi []byte) {
	s.compactRange(dataKey(nil, lo), append(dataKey(nil, hi), 0))
}

// compactRange compacts the keys in [from, to).
func (s *Store) compactRange(from, to []byte) {
	if s.closed.Load() {
		return
	}
	start := time.Now()
	s.engine.RLock()
	err := s.db.Compact(context.Background(), from, to, false)
	s.engine.RUnlock()
	if err != nil {
		s.opts.Logger.Warn("proxy: compaction failed", "db", s.opts.Name, "err", err)
		return
	}
	s.m.pxCompactions.Inc()
	s.m.pxCompactSeconds.Observe(time.Since(start).Seconds())
}

// submitCache hands a cache change to the committer and counts the outcome.
func (s *Store) submitCache(ch *cacheChange) {
	r := &request{kind: reqCache, cache: ch, done: make(chan struct{})}
	if err := s.submit(context.Background(), r); err != nil {
		if len(ch.admit) > 0 {
			s.m.pxAdmissions.WithLabelValues("failed").Add(float64(len(ch.admit)))
		}
		return
	}
	if len(ch.admit) > 0 {
		s.m.pxAdmissions.WithLabelValues("admitted").Add(float64(ch.admitted))
		s.px.admitted.Add(int64(ch.admitted))
		s.m.pxAdmissions.WithLabelValues("stale").Add(float64(len(ch.admit) - ch.admitted))
	}
	s.m.pxEvictions.Add(float64(ch.evicted))
	s.m.pxEvictedBytes.Add(float64(ch.evictedBytes))
}

// checkProxyDisk updates the soft and hard free-space flags.
func (s *Store) checkProxyDisk() {
	p := s.px
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return
	}
	soft, hard := p.limits.Disk(du.AvailBytes)
	if p.softLimited.Swap(soft) != soft {
		s.opts.Logger.Warn("proxy free disk crossed the soft limit", "db", s.opts.Name, "below", soft, "avail_bytes", du.AvailBytes, "soft_bytes", p.opts.SoftFreeBytes)
	}
	if p.hardLimited.Swap(hard) != hard {
		s.opts.Logger.Warn("proxy free disk crossed the hard limit", "db", s.opts.Name, "below", hard, "avail_bytes", du.AvailBytes, "hard_bytes", p.opts.HardFreeBytes)
	}
	s.m.pxSoftLimited.Set(b2f(soft))
	s.m.pxHardLimited.Set(b2f(hard))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sweep moves the CLOCK hand over the value records from hand on, and
// returns stored values outside the window that were not used since the
// hand last passed (their reference bit is cleared as it passes), until
// they add up to need bytes or a bound is reached. cycled reports that
// the hand came back to where it started or to the first key.
func (s *Store) sweep(hand []byte, need int64) (victims []eviction, next []byte, cycled bool) {
	v, err := s.View()
	if err != nil {
		return nil, hand, false
	}
	defer v.Close()
	p := s.px
	floor := p.floor(v.Index())
	it := v.it
	first := []byte{prefixData}
	from := first
	if hand != nil {
		from = dataKey(nil, hand)
	}
	wrapped := hand == nil
	var freed int64
	ok := it.SeekGE(from)
	for n := 0; n < maxSweep && len(victims) < maxEvictBatch && freed < need; n++ {
		if !ok || it.Key()[0] != prefixData {
			if wrapped {
				return victims, nil, true
			}
			wrapped = true
			ok = it.SeekGE(first)
			continue
		}
		k := it.Key()
		if wrapped && hand != nil && string(k) >= string(from) {
			return victims, append([]byte(nil), k[1:]...), true
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return victims, nil, false
		}
		rec, err := decodeRecord(raw)
		if err == nil && rec.kind != recRemote && rec.index <= floor && !p.clock.SecondChance(k[1:]) {
			victims = append(victims, eviction{key: append([]byte(nil), k[1:]...), index: rec.index})
			freed += int64(rec.valueLen)
		}
		ok = it.Next()
	}
	if ok && it.Key()[0] == prefixData {
		return victims, append([]byte(nil), it.Key()[1:]...), false
	}
	return victims, nil, wrapped // at the end: a full turn if it started at the first key
}
