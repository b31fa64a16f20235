package bench

import "time"

// PhaseCPU is the processor time spent while one target ran one phase,
// in seconds of CPU (one fully busy core for one second is 1). It is what
// the latency figures cannot show on a shared machine: how much work each
// server does per request, and how much else was running. Fields that
// could not be read are 0 (non-Linux systems, targets this run did not
// spawn).
type PhaseCPU struct {
	// Server is the CPU time of the spawned target process (all its
	// threads, user and system).
	Server float64 `json:"server_seconds,omitempty"`
	// Client is the CPU time of this benchmark process.
	Client float64 `json:"client_seconds,omitempty"`
	// Machine is the CPU time all processes used on all CPUs (including
	// the kernel's interrupt work and time stolen by a hypervisor).
	Machine float64 `json:"machine_seconds,omitempty"`
	// Ops is the number of requests of all kinds the phase completed.
	Ops int64 `json:"ops,omitempty"`
	// Hops is the CPU time of each process further down a replication
	// chain the target heads (the propagation scenario's intermediate,
	// then its leaf, which also answers the reader's gets until each
	// write shows, so its share grows with the chain's delay); Server is
	// the chain's root. Empty for other targets. These processes are part
	// of Others too.
	Hops []float64 `json:"hop_seconds,omitempty"`
}

// PerWrite is the CPU time per write, in microseconds, of the chain's
// root (hop 0) and of each process below it, for a phase that completed
// writes writes; nil if the chain's CPU time is unknown.
func (c PhaseCPU) PerWrite(writes int64) []float64 {
	if writes <= 0 || c.Server <= 0 || len(c.Hops) == 0 {
		return nil
	}
	us := []float64{c.Server / float64(writes) * 1e6}
	for _, h := range c.Hops {
		us = append(us, h/float64(writes)*1e6)
	}
	return us
}

// ServerPerOp is the server's CPU time per request, in microseconds, or
// 0 if unknown.
func (c PhaseCPU) ServerPerOp() float64 {
	if c.Server <= 0 || c.Ops <= 0 {
		return 0
	}
	return c.Server / float64(c.Ops) * 1e6
}

// Others is the CPU time used by everything but the server and this
// benchmark: other processes on the machine (the other target is idle
// while one runs) and the kernel's work for them. 0 if unknown.
func (c PhaseCPU) Others() float64 {
	if c.Machine <= 0 {
		return 0
	}
	return max(0, c.Machine-c.Server-c.Client)
}

// cpuSample is the cumulative CPU counters at one moment.
type cpuSample struct {
	server, client, machine float64
	serverOK, machineOK     bool
	hops                    []float64 // nil unless every hop was read
	at                      time.Time
}

// sampleCPU reads the counters of pid (0: none), of the processes
// further down its chain (hops, possibly none), of this process and of
// the machine.
func sampleCPU(pid int, hops []int) cpuSample {
	s := cpuSample{at: time.Now()}
	if pid > 0 {
		s.server, s.serverOK = processCPU(pid)
	}
	for _, h := range hops {
		sec, ok := 0.0, h > 0
		if ok {
			sec, ok = processCPU(h)
		}
		if !ok {
			s.hops = nil
			break
		}
		s.hops = append(s.hops, sec)
	}
	s.client = selfCPU()
	s.machine, s.machineOK = machineCPU()
	return s
}

// cpuBetween is the CPU time spent between two samples.
func cpuBetween(a, b cpuSample) PhaseCPU {
	var c PhaseCPU
	if a.serverOK && b.serverOK {
		c.Server = b.server - a.server
	}
	c.Client = b.client - a.client
	if a.machineOK && b.machineOK {
		c.Machine = b.machine - a.machine
	}
	if len(a.hops) > 0 && len(a.hops) == len(b.hops) {
		for i := range a.hops {
			c.Hops = append(c.Hops, b.hops[i]-a.hops[i])
		}
	}
	return c
}
