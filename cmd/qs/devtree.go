package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// devPidFile lists, one per line, the pids of the qs serve processes a
// qs dev started in a data directory, so that the next qs dev there can
// stop any left running.
const devPidFile = "qs-dev.pids"

// devBallastBytes is the ballast of each dev node: enough to show the
// mechanism, not the 64 MiB a production node reserves.
const devBallastBytes = 1 << 20

// recordDevPids writes the pids of the nodes started so far.
func recordDevPids(data string, nodes []*devNode) error {
	var b strings.Builder
	for _, n := range nodes {
		if n.cmd != nil && n.cmd.Process != nil {
			fmt.Fprintln(&b, n.cmd.Process.Pid)
		}
	}
	return os.WriteFile(filepath.Join(data, devPidFile), []byte(b.String()), 0o644)
}

// stopStaleTree stops the qs serve processes a previous qs dev left
// running on data (listed in its pid file and still serving a directory
// under data): SIGTERM, then SIGKILL after grace. It returns how many it
// stopped.
func stopStaleTree(data string, grace time.Duration) (int, error) {
	raw, err := os.ReadFile(filepath.Join(data, devPidFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	abs, err := filepath.Abs(data)
	if err != nil {
		return 0, err
	}
	var stale []int
	for _, f := range strings.Fields(string(raw)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		if servesUnder(pid, abs) {
			stale = append(stale, pid)
		}
	}
	for _, pid := range stale {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for _, pid := range stale {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// SIGKILL takes effect at once, but the pids stay until reaped; wait
	// (bounded) until the kernel has released them, and so their ports
	// and locks.
	for _, pid := range stale {
		for i := 0; i < 200 && alive(pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return len(stale), os.Remove(filepath.Join(data, devPidFile))
}

// processes is "process" or "processes", as n requires.
func processes(n int) string {
	if n == 1 {
		return "process"
	}
	return "processes"
}

// servesUnder reports whether pid is a qs serve whose --data is a
// directory under data (an absolute path), so a reused pid is left alone.
func servesUnder(pid int, data string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
	return isServeUnder(args, cwd, data)
}

// isServeUnder is servesUnder's test on a process's arguments and working
// directory.
func isServeUnder(args []string, cwd, data string) bool {
	if len(args) < 2 || args[1] != "serve" {
		return false
	}
	for i := 2; i+1 < len(args); i++ {
		if args[i] == "--data" || args[i] == "-data" {
			dir := args[i+1]
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(cwd, dir)
			}
			rel, err := filepath.Rel(data, filepath.Clean(dir))
			return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
		}
	}
	return false
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(st, ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z'
}

// diskUsage is the space the files under dir take on disk (allocated
// blocks, so sparse and preallocated files count as they are).
func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (a compaction, say)
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}
