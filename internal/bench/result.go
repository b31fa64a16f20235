package bench

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"
)

// Phase is what one target did during one phase of a scenario.
type Phase struct {
	// Name is the phase within the scenario ("0 writers", "batch 100").
	Name     string `json:"name"`
	Target   string `json:"target"`
	Baseline bool   `json:"baseline,omitempty"`
	// Seconds is the measured wall time: from the start of the phase to
	// the end of the last request.
	Seconds float64 `json:"seconds"`
	// Ops has one entry per kind of request of the scenario.
	Ops []OpStats `json:"ops"`
	// Errors counts failed requests (including misses and wrong values);
	// ErrorKinds splits them by kind and FirstError is an example.
	Errors int64 `json:"errors"`
	// CPU is the processor time the phase cost (see PhaseCPU).
	CPU PhaseCPU `json:"cpu"`
	// DiskSyncMicros is the median time to write and fsync 4 KiB in the
	// spawned servers' work directory, measured just before the phase
	// (0: not measured).
	DiskSyncMicros float64 `json:"disk_sync_us,omitempty"`
	// Engine is what a qs target's storage engine did (nil for targets
	// that do not report it, such as memcached).
	Engine     *PhaseEngine     `json:"engine,omitempty"`
	ErrorKinds map[string]int64 `json:"error_kinds,omitempty"`
	FirstError string           `json:"first_error,omitempty"`
}

// Op returns the stats of one kind of request, or nil.
func (p *Phase) Op(op string) *OpStats {
	for i := range p.Ops {
		if p.Ops[i].Op == op {
			return &p.Ops[i]
		}
	}
	return nil
}

func (p *Phase) setErrors(e *errCounter) {
	p.Errors = e.total
	p.ErrorKinds = e.kinds
	p.FirstError = e.first
}

// Ratio compares one target to the baseline for one kind of request in
// one phase. Latency ratios above 1 mean the target is slower; a
// throughput ratio above 1 means it is faster. 0 means not computable
// (no successful requests on one side).
type Ratio struct {
	Phase      string  `json:"phase"`
	Op         string  `json:"op"`
	Target     string  `json:"target"`
	Baseline   string  `json:"baseline"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
	P999       float64 `json:"p99_9"`
	Throughput float64 `json:"throughput"`
}

// Result is the outcome of one scenario against every target.
type Result struct {
	Scenario    string   `json:"scenario"`
	Description string   `json:"description"`
	Phases      []Phase  `json:"phases"`
	Ratios      []Ratio  `json:"ratios,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	// Tiers has a row per stage and workload of the tiers scenario.
	Tiers []TierRow `json:"tiers,omitempty"`
	// Failures name the targets that could not run (part of) the scenario:
	// loading failed, or a spawned server died.
	Failures []string `json:"failures,omitempty"`
	// Targets are the servers as they were during this scenario (spawned
	// servers are fresh for each scenario, on new ports).
	Targets []Target `json:"targets"`
}

// Errors is the number of failed requests over all phases.
func (r *Result) Errors() int64 {
	var n int64
	for _, p := range r.Phases {
		n += p.Errors
	}
	return n
}

// computeRatios pairs each phase of a non-baseline target with the
// baseline's phase of the same name.
func computeRatios(phases []Phase) []Ratio {
	var out []Ratio
	for i := range phases {
		p := &phases[i]
		if p.Baseline {
			continue
		}
		var base *Phase
		for j := range phases {
			if phases[j].Baseline && phases[j].Name == p.Name {
				base = &phases[j]
				break
			}
		}
		if base == nil {
			continue
		}
		for _, op := range p.Ops {
			b := base.Op(op.Op)
			if b == nil {
				continue
			}
			out = append(out, Ratio{
				Phase:      p.Name,
				Op:         op.Op,
				Target:     p.Target,
				Baseline:   base.Target,
				P50:        ratio(op.Latency.P50, b.Latency.P50),
				P99:        ratio(op.Latency.P99, b.Latency.P99),
				P999:       ratio(op.Latency.P999, b.Latency.P999),
				Throughput: ratio(op.OpsPerSec, b.OpsPerSec),
			})
		}
	}
	return out
}

func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// Report is everything one run measured.
type Report struct {
	// Command is the command line of the run.
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	// Targets lists every target once, as during its first scenario.
	Targets     []Target `json:"targets"`
	Results     []Result `json:"results"`
	Interrupted bool     `json:"interrupted,omitempty"`
	// Warnings are about the run as a whole (data directory on tmpfs...).
	Warnings []string `json:"warnings,omitempty"`
}

// Failures is the number of targets, over all scenarios, that could not
// run (part of) a scenario.
func (r *Report) Failures() int {
	n := 0
	for i := range r.Results {
		n += len(r.Results[i].Failures)
	}
	return n
}

// Errors is the number of failed requests over all scenarios.
func (r *Report) Errors() int64 {
	var n int64
	for i := range r.Results {
		n += r.Results[i].Errors()
	}
	return n
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	GoVersion string `json:"go_version"`
}

// ThisMachine reads the machine description; fields it cannot read are
// left empty.
func ThisMachine() Machine {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
