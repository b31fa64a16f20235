package bench

import (
	"os"
	"slices"
	"time"
)

// fsyncProbes is how many 4 KiB write+fsync rounds probeFsync times.
const fsyncProbes = 9

// probeFsync returns the median time to write 4 KiB to a new file in dir
// and fsync it, over fsyncProbes rounds, or 0 if it cannot tell. It is the
// floor under every durable commit on that disk at that moment: on a
// shared machine, other processes' writes can multiply it.
func probeFsync(dir string) time.Duration {
	f, err := os.CreateTemp(dir, "qs-bench-fsync-probe-")
	if err != nil {
		return 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	times := make([]time.Duration, 0, fsyncProbes)
	for range fsyncProbes {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0
		}
		if err := f.Sync(); err != nil {
			return 0
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return times[len(times)/2]
}
