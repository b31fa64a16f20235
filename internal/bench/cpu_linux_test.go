package bench

import (
	"os"
	"testing"
	"time"
)

// burn keeps one core busy until this process has used cpu seconds more
// of CPU, or for at most 20 s (on a busy machine a loop gets less than a
// core).
func burn(cpu float64) {
	start := selfCPU()
	for end := time.Now().Add(20 * time.Second); selfCPU()-start < cpu && time.Now().Before(end); {
		for range 100000 {
		}
	}
}

func TestCPUCounters(t *testing.T) {
	pid := os.Getpid()
	a := sampleCPU(pid, nil)
	if !a.serverOK || !a.machineOK {
		t.Fatalf("counters not readable: %+v", a)
	}
	burn(0.2)
	c := cpuBetween(a, sampleCPU(pid, nil))
	// This process is both "server" and "client" here; /proc counts in
	// 10 ms ticks.
	if c.Server < 0.1 || c.Client < 0.2 || c.Machine < 0.1 {
		t.Errorf("after 0.2 s of CPU in a busy loop: %+v", c)
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

func TestProbeFsync(t *testing.T) {
	dir := t.TempDir()
	if d := probeFsync(dir); d <= 0 || d > 10*time.Second {
		t.Errorf("fsync probe in %s: %v", dir, d)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("probe left %d files behind", len(entries))
	}
	if d := probeFsync(dir + "/missing"); d != 0 {
		t.Errorf("probe of a missing directory: %v", d)
	}
}
