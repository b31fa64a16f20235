package main

import (
	"os"
	"runtime"
)

// minServeProcs is the least GOMAXPROCS `qs serve` runs with.
//
// With as many Ps as cores, a goroutine woken by the network (a reader's
// request) waits for a P while background work that does not block for
// milliseconds at a time — Pebble's flushes and compactions, the
// committer's hashing and copying of large values — holds them all: Go
// preempts a running goroutine only every 10 ms and has no priorities.
// With more Ps than cores, those goroutines run on more threads, and the
// kernel, which switches to a woken thread quickly, shares the cores.
// Measured on 2 cores (docs/benchmarks.md, "GOMAXPROCS"): read p99.9
// under two durable 40 kB writers 0.69–0.83× of GOMAXPROCS 2's in four
// same-run pairs, reads/s +15–20%, writes/s −3–5%.
const minServeProcs = 8

// serveProcs is the GOMAXPROCS for `qs serve`: the runtime's default
// (cores, or the container's CPU limit) but at least minServeProcs,
// unless GOMAXPROCS is set in the environment, which is left as it is.
func serveProcs(runtimeDefault int, env string) int {
	if env != "" {
		return runtimeDefault
	}
	return max(runtimeDefault, minServeProcs)
}

// setServeProcs applies serveProcs and returns the value in force.
func setServeProcs() int {
	n := serveProcs(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS"))
	runtime.GOMAXPROCS(n)
	return n
}
