package cache

// CompactAfter is how many bytes a proxy gives up before it compacts the
// key range that held them (and how many bytes of its log retention drops
// before it compacts the log's). Giving up a value rewrites its record
// in place; the old value keeps taking disk until a compaction rewrites
// its file, and nothing else would start one in a range nobody writes.
const CompactAfter = 64 << 20

// Reclaim gathers the values a proxy gave up since it last compacted
// their key range: the bytes they held and the keys they span. It is not
// safe for concurrent use (the keeper owns it); the zero value is empty.
type Reclaim struct {
	bytes  int64
	lo, hi []byte
}

// Key adds a key given up to the range. The Reclaim keeps key: the
// caller must not change it afterwards.
func (r *Reclaim) Key(key []byte) {
	if r.lo == nil || string(key) < string(r.lo) {
		r.lo = key
	}
	if r.hi == nil || string(key) > string(r.hi) {
		r.hi = key
	}
}

// Freed adds the bytes a round gave up. Once they add up to CompactAfter
// it returns the range of keys to compact, from lo to hi inclusive, and
// starts over.
func (r *Reclaim) Freed(bytes int64) (lo, hi []byte, compact bool) {
	r.bytes += bytes
	if r.bytes < CompactAfter {
		return nil, nil, false
	}
	lo, hi = r.lo, r.hi
	*r = Reclaim{}
	return lo, hi, true
}
