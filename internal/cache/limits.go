package cache

import "time"

// Limits bound what a proxy stores.
type Limits struct {
	// Budget is the value bytes the cache may hold (negative: none).
	Budget int64
	// SoftFree: while the disk has less free space, values are evicted
	// beyond the budget.
	SoftFree uint64
	// HardFree: while the disk has less free space, no value is stored.
	HardFree uint64
}

// SoftEvictEvery is how often, while free space is below the soft limit,
// a tenth of the cache is evicted: disk space comes back only as
// compactions run, so the cache shrinks in steps.
const SoftEvictEvery = time.Second

// Bytes is the budget, zero when there is none.
func (l Limits) Bytes() int64 { return max(l.Budget, 0) }

// Over reports whether a cache holding cached bytes is over its budget.
func (l Limits) Over(cached int64) bool { return cached > l.Bytes() }

// Disk reports which free-space limits a disk with avail free bytes is
// below.
func (l Limits) Disk(avail uint64) (soft, hard bool) {
	return avail < l.SoftFree, avail < l.HardFree
}

// Need returns the bytes to evict from a cache holding cached bytes. soft
// is whether free space is below the soft limit and sinceSoft the time
// since the last soft step; step reports that this call takes a soft
// step (the caller then restarts sinceSoft).
func (l Limits) Need(cached int64, soft bool, sinceSoft time.Duration) (need int64, step bool) {
	need = cached - l.Bytes()
	if soft && sinceSoft >= SoftEvictEvery {
		return max(need, cached/10+1), true
	}
	return need, false
}
