package bench

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// clockTicks is USER_HZ, the unit of the /proc CPU counters; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// processCPU returns the user and system CPU seconds of process pid and
// its threads, from /proc/<pid>/stat.
func processCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces; fields after it are
	// counted from its closing parenthesis: state is field 3, utime 14,
	// stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) / clockTicks, true
}

// selfCPU returns this process's user and system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// machineCPU returns the CPU seconds all CPUs spent busy (everything but
// idle and iowait), from the first line of /proc/stat.
func machineCPU() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, false
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal (guest time is
	// already counted in user).
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, false
		}
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return float64(busy) / clockTicks, true
}
