package store

import (
	"context"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
)

// The cache keeper of a proxy store: one goroutine, owned by the store,
// that turns the readers' admissions and the cache's limits into committer
// requests. What to evict and when is internal/cache's policy (Limits,
// Pacer, Clock.Sweep, Reclaim); the keeper feeds it the store's records
// and counters, and everything it decides is checked again by the
// committer against the key's record at commit time (prepareCache).

// maxAdmitBatch bounds the admissions of one cache request (the
// evictions of one are bounded by cache.MaxVictims).
const maxAdmitBatch = 1024

func (s *Store) keepProxyCache() {
	defer s.bg.Done()
	p := s.px
	t := time.NewTicker(p.opts.EvictInterval)
	defer t.Stop()
	var hand cache.Hand // the CLOCK hand: where to sweep from
	var lastSoft time.Time
	pace := cache.NewPacer(p.opts.EvictInterval)
	var reclaim cache.Reclaim // evicted since the last compaction
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
		if p.logDropped.Load() >= cache.CompactAfter {
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
		if need <= 0 {
			s.setFull(false)
			continue
		}
		if pace.Idle(now, s.applied.Load()) {
			continue
		}
		rounds := pace.Rounds(cache.MaxSweepRounds)
		for round := 0; round < rounds && need > 0; round++ {
			victims, next, cycled := s.sweep(hand, need)
			hand = next
			if len(victims) > 0 {
				pace.Found()
				ch := &cacheChange{evict: victims}
				s.submitCache(ch)
				need -= ch.evictedBytes
				for _, v := range victims {
					reclaim.Key(v.key)
				}
				if lo, hi, compact := reclaim.Freed(ch.evictedBytes); compact {
					s.compactEvicted(lo, hi)
				}
			}
			if cycled {
				// A whole turn short of its need: nothing else stored
				// can go now (cache.Pacer idles the sweeps; the window
				// moving ends that), and a value admitted would be the
				// next to go.
				s.m.pxSweepTurns.Inc()
				s.setFull(need > 0)
				pace.Cycled(now, s.applied.Load())
				break
			}
		}
		if need <= 0 {
			s.setFull(false)
		}
	}
}

// setFull records whether the cache is full (proxyState.full).
func (s *Store) setFull(full bool) {
	s.px.full.Store(full)
	s.m.pxFull.Set(b2f(full))
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

// sweep runs one round of the CLOCK hand (cache.Clock.Sweep) over the
// value records from hand on, and returns the stored values outside the
// window it gives up, adding up to need bytes unless a bound or the end
// of a turn comes first; next is where the next round goes on from, and
// cycled reports that the turn became whole.
func (s *Store) sweep(hand cache.Hand, need int64) (victims []eviction, next cache.Hand, cycled bool) {
	v, err := s.View()
	if err != nil {
		return nil, hand, false
	}
	defer v.Close()
	p := s.px
	next, cycled = p.clock.Sweep((*sweepCursor)(v), hand, p.floor(v.Index()), need, func(key []byte, index uint64) {
		victims = append(victims, eviction{key: append([]byte(nil), key...), index: index})
	})
	return victims, next, cycled
}

// sweepCursor is a view's value records as the hand sees them
// (cache.SweepCursor).
type sweepCursor View

func (c *sweepCursor) SeekGE(key []byte) ([]byte, bool) {
	c.kbuf = dataKey(c.kbuf, key)
	return c.at(c.it.SeekGE(c.kbuf))
}

func (c *sweepCursor) Next() ([]byte, bool) { return c.at(c.it.Next()) }

// at returns the key of the value record the iterator is at, if it is
// at one.
func (c *sweepCursor) at(ok bool) ([]byte, bool) {
	if !ok {
		return nil, false
	}
	if k := c.it.Key(); k[0] == prefixData {
		c.s.m.pxSweepRecords.Inc()
		return k[1:], true
	}
	return nil, false
}

// Record decodes the record at the cursor; one that does not decode is
// counted (integrity error value_crc, as a read of it is) and passed
// over as not stored. A record with the remote flag is not stored
// whether it decodes or not, so it is passed over without decoding: most
// of a proxy's records are remote.
func (c *sweepCursor) Record() (index uint64, size int64, stored bool, err error) {
	raw, err := c.it.ValueAndErr()
	if err != nil {
		return 0, 0, false, err
	}
	if len(raw) < recHeader || raw[4]&flagRemote != 0 {
		return 0, 0, false, nil
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		c.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
		return 0, 0, false, nil
	}
	return rec.index, int64(rec.valueLen), rec.kind != recRemote, nil
}
