package cache

// Window is a proxy's sliding window, in log entries: the values written
// by the last Window entries it applied are always stored there, never
// evicted, so a replica less than Window entries behind the proxy holds
// every version the proxy may ask it for.
type Window int64

// Floor is the highest index outside the window once last is applied:
// values written at or below it may be remote. A window longer than the
// log holds every value (floor 0); a window below one entry holds none
// (floor last).
func (w Window) Floor(last uint64) uint64 {
	switch {
	case w < 1:
		return last
	case last <= uint64(w):
		return 0
	}
	return last - uint64(w)
}

// Entries is the number of entries the window spans once last is
// applied: the window, or the whole log while it is shorter.
func (w Window) Entries(last uint64) uint64 { return min(last, uint64(max(w, 0))) }
