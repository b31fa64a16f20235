package bench

import (
	"os"
	"testing"
	"time"
)

// burn keeps one core busy for d.
func burn(d time.Duration) int {
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		n++
	}
	return n
}

func TestCPUCounters(t *testing.T) {
	pid := os.Getpid()
	a := sampleCPU(pid)
	if !a.serverOK || !a.machineOK {
		t.Fatalf("counters not readable: %+v", a)
	}
	burn(200 * time.Millisecond)
	c := cpuBetween(a, sampleCPU(pid))
	// This process is both "server" and "client" here; /proc counts in
	// 10 ms ticks.
	if c.Server < 0.1 || c.Client < 0.1 || c.Machine < 0.1 {
		t.Errorf("after 200ms of busy loop: %+v", c)
	}
	if c.Server > 5 {
		t.Errorf("implausible: %+v", c)
	}
	if _, ok := processCPU(1 << 30); ok {
		t.Error("CPU of a process that does not exist")
	}
}

func TestPhaseCPUFigures(t *testing.T) {
	c := PhaseCPU{Server: 0.5, Client: 0.3, Machine: 1.0, Ops: 1000}
	if got := c.ServerPerOp(); got != 500 {
		t.Errorf("per op %v µs, want 500", got)
	}
	if got := c.Others(); got < 0.199 || got > 0.201 {
		t.Errorf("others %v, want 0.2", got)
	}
	if (PhaseCPU{Server: 1}).ServerPerOp() != 0 || (PhaseCPU{Ops: 5}).ServerPerOp() != 0 {
		t.Error("per op without both figures")
	}
	if (PhaseCPU{Server: 2, Machine: 1}).Others() != 0 {
		t.Error("others below 0")
	}
}
