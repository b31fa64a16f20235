package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scenario names, in the order "all" runs them.
const (
	ScenarioReadLat     = "readlat"
	ScenarioGet         = "get"
	ScenarioWrite       = "write"
	ScenarioGetPut      = "getput"
	ScenarioPropagation = "propagation"
	ScenarioTiers       = "tiers"
)

// Scenarios lists every scenario, in the order "all" runs them.
var Scenarios = []string{ScenarioReadLat, ScenarioGet, ScenarioWrite, ScenarioGetPut, ScenarioPropagation}

// ExtraScenarios are run only when named: "all" leaves them out. tiers
// starts a data centre of 13 processes and loads a million keys.
var ExtraScenarios = []string{ScenarioTiers}

// Ways to pre-load the keys of the get scenario (Config.LoadVia).
const (
	LoadAuto     = "auto"     // HTTP batches when the target has an HTTP address, else memcache
	LoadMemcache = "memcache" // pipelined memcache sets
	LoadHTTP     = "http"     // POST /v1/{db}/batch
)

// What the readlat reader reads through (Config.ReadLatVia).
const (
	ReadViaMemcache = "memcache" // get, on the memcached port
	ReadViaHTTP     = "http"     // GET /v1/{db}/keys/{key}, keep-alive; targets without HTTP are skipped
)

// How the readlat reader waits for its answers (Config.ReadLatReader).
const (
	// ReaderThread: on a thread of its own, blocked in read(2) (Linux;
	// elsewhere ReaderPoller). Only the server's delays and the kernel's
	// wake-up of one thread are measured.
	ReaderThread = "thread"
	// ReaderPoller: a goroutine parked in Go's network poller, like most
	// Go clients. Under load the client's own wake-ups (poller thread,
	// then a P, then maybe another thread) add to every reply's latency,
	// on both sides of a comparison alike.
	ReaderPoller = "poller"
)

// Config is everything a run needs: what to measure, against which servers,
// and the knobs of every scenario. Start from DefaultConfig; every field's
// comment gives its default. Validate reports the first invalid field.
type Config struct {
	// Scenarios to run, in order. No default: the command line names them.
	Scenarios []string `json:"scenarios"`

	// Targets are servers that are already running. Default none.
	Targets []Target `json:"-"`
	// Spawn starts, for this run only, a qs server and a memcached baseline
	// on loopback ports and stops them at the end. Default false.
	Spawn bool `json:"spawn"`
	// NoBaseline, with Spawn, starts only qs. Default false.
	NoBaseline bool `json:"no_baseline,omitempty"`
	// QSBin is the qs binary to spawn. Default "" (the running executable).
	QSBin string `json:"qs_bin,omitempty"`
	// QSConfig is a configuration file for the spawned qs (its --config),
	// e.g. to measure memcache_read_nice. Default "" (none).
	QSConfig string `json:"qs_config,omitempty"`
	// MemcachedBin is the memcached binary to spawn. Default "" (looked up
	// in PATH, then /usr/bin/memcached).
	MemcachedBin string `json:"memcached_bin,omitempty"`
	// MemcachedMemMB is memcached's -m. Default 1024.
	MemcachedMemMB int `json:"memcached_mem_mb"`
	// WorkDir is the parent of the spawned server's temporary data
	// directory. Default "" (os.TempDir()).
	WorkDir string `json:"work_dir,omitempty"`
	// SpawnTimeout bounds how long a spawned server may take to print its
	// listeners (qs) or accept connections (memcached). Default 30s.
	SpawnTimeout time.Duration `json:"spawn_timeout_ns"`
	// Baseline names the target the others are compared to. Default
	// "memcached", the name of the spawned baseline.
	Baseline string `json:"baseline"`
	// AllowRemote permits target addresses that are not loopback.
	// Default false: the tool only talks to 127.0.0.0/8 and ::1.
	AllowRemote bool `json:"allow_remote,omitempty"`

	// Duration of each measured phase. Default 20s.
	Duration time.Duration `json:"duration_ns"`
	// Slices cuts each phase into this many slices that the targets take
	// in turns, so that a change in the rest of the machine's load reaches
	// them alike. Default 4.
	Slices int `json:"slices"`
	// Timeout bounds each HTTP request, how long a memcache request may
	// run past the end of its phase (memcache connections get one deadline
	// per phase rather than one per request, which would cost a timer
	// update per request), and loading. Default 10s.
	Timeout time.Duration `json:"timeout_ns"`
	// Conns is the number of concurrent connections of the get scenario
	// and of concurrent HTTP clients of the write scenario. Default 16.
	Conns int `json:"conns"`
	// Seed makes the random key choices and values of a run repeatable.
	// Default 1.
	Seed uint64 `json:"seed"`

	// ReadLatKeys is the number of 2-byte keys (with 2-byte values) the
	// readlat reader cycles through. Default 20, at most 100.
	ReadLatKeys int `json:"readlat_keys"`
	// ReadLatWriters lists the number of writer connections of each
	// readlat phase. Default 0, 1, 2.
	ReadLatWriters []int `json:"readlat_writers"`
	// ReadLatValueSize is the size of the values the readlat writers set.
	// Default 40960 (40 kB).
	ReadLatValueSize int `json:"readlat_value_size"`
	// ReadLatWriteRate caps the writes per second of a readlat phase, all
	// its writers together (each paces itself to its share). 0, the
	// default: each writer sets its next value as soon as the last one is
	// stored. A cap lets a baseline that stores faster be measured under
	// the same write load as the target.
	ReadLatWriteRate int `json:"readlat_write_rate,omitempty"`
	// ReadLatReader is how the reader waits for its answers: ReaderThread
	// or ReaderPoller. Default ReaderThread.
	ReadLatReader string `json:"readlat_reader"`
	// ReadLatVia is what the reader reads through: ReadViaMemcache or
	// ReadViaHTTP (database DB). The writers always use memcached.
	// Default ReadViaMemcache.
	ReadLatVia string `json:"readlat_via"`

	// GetVia is what the get scenario's single gets go through:
	// ReadViaMemcache, or ReadViaHTTP (GET /v1/{DB}/keys/{key} on
	// keep-alive connections) for targets with an HTTP address, the others
	// (a memcached baseline) still through memcache, so that the ratio
	// compares qs's HTTP API with memcached. Multi-gets always use
	// memcache. Default ReadViaMemcache.
	GetVia string `json:"get_via"`

	// Keys is the number of keys ("k%06d") the get scenario loads and
	// reads. Default 100000.
	Keys int `json:"keys"`
	// TiersKeys is the number of 1 KiB keys the tiers scenario loads.
	// Default 1,000,000 (--keys sets it too).
	TiersKeys int `json:"tiers_keys"`
	// TiersWarmup is how long the tiers scenario reads before each
	// measurement, to fill the caches. Default 20s.
	TiersWarmup time.Duration `json:"tiers_warmup_ns"`
	// TiersStages names the stages of TierStages the tiers scenario runs
	// (a stage's base need not run). Default all of them.
	TiersStages []string `json:"tiers_stages,omitempty"`
	// TiersWorkloads names the workloads the tiers scenario runs. Default
	// both (zipf, regional).
	TiersWorkloads []string `json:"tiers_workloads,omitempty"`
	// ValueSize is the value size of the get and write scenarios.
	// Default 100.
	ValueSize int `json:"value_size"`
	// MultiKeys is the number of distinct keys of one multi-get.
	// Default 100.
	MultiKeys int `json:"multi_keys"`
	// MultiPct is the share of get-scenario requests, in percent, that are
	// multi-gets; the rest are single gets. Default 50.
	MultiPct int `json:"multi_pct"`
	// LoadVia chooses how the get scenario loads its keys: LoadAuto,
	// LoadMemcache or LoadHTTP. Default LoadAuto.
	LoadVia string `json:"load_via"`

	// BatchSizes lists the number of set operations per HTTP batch of each
	// write phase. Default 1, 100.
	BatchSizes []int `json:"batch_sizes"`
	// PropagationRate is the writes per second of the propagation
	// scenario's writer. Default 100.
	PropagationRate int `json:"propagation_rate"`
	// DB is the database of the HTTP API. Default "default".
	DB string `json:"db"`
}

// DefaultConfig returns the defaults of every field.
func DefaultConfig() Config {
	return Config{
		MemcachedMemMB:   1024,
		SpawnTimeout:     30 * time.Second,
		Baseline:         "memcached",
		Duration:         20 * time.Second,
		Slices:           4,
		Timeout:          10 * time.Second,
		Conns:            16,
		Seed:             1,
		ReadLatKeys:      20,
		ReadLatWriters:   []int{0, 1, 2},
		ReadLatValueSize: 40 << 10,
		ReadLatReader:    ReaderThread,
		ReadLatVia:       ReadViaMemcache,
		GetVia:           ReadViaMemcache,
		Keys:             100_000,
		TiersKeys:        1_000_000,
		TiersWarmup:      20 * time.Second,
		ValueSize:        100,
		MultiKeys:        100,
		MultiPct:         50,
		LoadVia:          LoadAuto,
		BatchSizes:       []int{1, 100},
		PropagationRate:  100,
		DB:               "default",
	}
}

// minSlice is the shortest slice of a phase.
const minSlice = 50 * time.Millisecond

// maxValueSize is memcached's default item size limit (-I 1m) minus room
// for the item header.
const maxValueSize = 1<<20 - 1024

// Validate returns an error naming the first invalid field.
func (c *Config) Validate() error {
	if len(c.Scenarios) == 0 {
		return errors.New("no scenario given (one or more of: " + strings.Join(slices.Concat(Scenarios, ExtraScenarios), ", ") + ", all)")
	}
	for _, s := range c.Scenarios {
		if !isScenario(s) {
			return fmt.Errorf("unknown scenario %q (want %s or all)", s, strings.Join(slices.Concat(Scenarios, ExtraScenarios), ", "))
		}
	}
	if slices.Contains(c.Scenarios, ScenarioTiers) && !c.Spawn {
		return errors.New("the tiers scenario starts its own data centre: pass --spawn")
	}
	if !c.Spawn && len(c.Targets) == 0 {
		return errors.New("nothing to measure: pass --spawn or at least one --target")
	}
	if c.NoBaseline && !c.Spawn {
		return errors.New("--no-baseline only applies to --spawn")
	}
	names := map[string]bool{}
	if c.Spawn {
		names["qs"] = true
		if !c.NoBaseline {
			names["memcached"] = true
		}
	}
	for _, t := range c.Targets {
		if names[t.Name] {
			return fmt.Errorf("target name %q used twice (the spawned servers are named qs and memcached)", t.Name)
		}
		names[t.Name] = true
		if err := t.check(c.AllowRemote); err != nil {
			return err
		}
	}
	switch {
	case c.Duration <= 0:
		return errors.New("duration must be positive")
	case c.Slices < 1 || c.Slices > 100:
		return fmt.Errorf("slices %d out of range 1..100", c.Slices)
	case c.Duration/time.Duration(c.Slices) < minSlice:
		return fmt.Errorf("slices of %v: want at least %v (a longer duration or fewer slices)", c.Duration/time.Duration(c.Slices), minSlice)
	case c.Timeout <= 0:
		return errors.New("timeout must be positive")
	case c.SpawnTimeout <= 0:
		return errors.New("spawn timeout must be positive")
	case c.MemcachedMemMB <= 0:
		return errors.New("memcached memory must be positive")
	case c.Conns < 1 || c.Conns > 4096:
		return fmt.Errorf("conns %d out of range 1..4096", c.Conns)
	case c.ReadLatKeys < 1 || c.ReadLatKeys > 100:
		return fmt.Errorf("readlat keys %d out of range 1..100 (keys are 2 bytes)", c.ReadLatKeys)
	case len(c.ReadLatWriters) == 0:
		return errors.New("readlat writers: need at least one phase")
	case c.ReadLatValueSize < 1 || c.ReadLatValueSize > maxValueSize:
		return fmt.Errorf("readlat value size %d out of range 1..%d", c.ReadLatValueSize, maxValueSize)
	case c.ReadLatWriteRate < 0 || c.ReadLatWriteRate > 1_000_000:
		return fmt.Errorf("readlat write rate %d out of range 0..1000000 writes/s", c.ReadLatWriteRate)
	case c.ReadLatReader != ReaderThread && c.ReadLatReader != ReaderPoller:
		return fmt.Errorf("readlat reader %q: want %s or %s", c.ReadLatReader, ReaderThread, ReaderPoller)
	case c.ReadLatVia != ReadViaMemcache && c.ReadLatVia != ReadViaHTTP:
		return fmt.Errorf("readlat via %q: want %s or %s", c.ReadLatVia, ReadViaMemcache, ReadViaHTTP)
	case c.GetVia != ReadViaMemcache && c.GetVia != ReadViaHTTP:
		return fmt.Errorf("get via %q: want %s or %s", c.GetVia, ReadViaMemcache, ReadViaHTTP)
	case c.Keys < 1 || c.Keys > 1_000_000:
		return fmt.Errorf("keys %d out of range 1..1000000 (keys are k%%06d)", c.Keys)
	case c.TiersKeys < 1000 || c.TiersKeys > 1_000_000:
		return fmt.Errorf("tiers keys %d out of range 1000..1000000", c.TiersKeys)
	case c.TiersWarmup < 0:
		return errors.New("tiers warm-up must not be negative")
	case c.ValueSize < 1 || c.ValueSize > maxValueSize:
		return fmt.Errorf("value size %d out of range 1..%d", c.ValueSize, maxValueSize)
	case c.MultiKeys < 1 || c.MultiKeys > c.Keys:
		return fmt.Errorf("multi-get keys %d out of range 1..keys (%d)", c.MultiKeys, c.Keys)
	case c.MultiPct < 0 || c.MultiPct > 100:
		return fmt.Errorf("multi-get percentage %d out of range 0..100", c.MultiPct)
	case c.LoadVia != LoadAuto && c.LoadVia != LoadMemcache && c.LoadVia != LoadHTTP:
		return fmt.Errorf("load-via %q: want %s, %s or %s", c.LoadVia, LoadAuto, LoadMemcache, LoadHTTP)
	case len(c.BatchSizes) == 0:
		return errors.New("batch sizes: need at least one phase")
	case c.PropagationRate < 1 || c.PropagationRate > 100_000:
		return fmt.Errorf("propagation rate %d out of range 1..100000 writes/s", c.PropagationRate)
	case c.DB == "" || strings.ContainsAny(c.DB, "/?#% "):
		return fmt.Errorf("database name %q is empty or not URL-safe", c.DB)
	}
	for _, name := range c.TiersStages {
		if !slices.ContainsFunc(TierStages, func(s TierStage) bool { return s.Name == name }) {
			var names []string
			for _, s := range TierStages {
				names = append(names, s.Name)
			}
			return fmt.Errorf("tiers stage %q: want one of %s", name, strings.Join(names, ", "))
		}
	}
	for _, w := range c.TiersWorkloads {
		if !slices.Contains(tierWorkloads, w) {
			return fmt.Errorf("tiers workload %q: want %s", w, strings.Join(tierWorkloads, " or "))
		}
	}
	for _, w := range c.ReadLatWriters {
		if w < 0 || w > 256 {
			return fmt.Errorf("readlat writers %d out of range 0..256", w)
		}
	}
	for _, b := range c.BatchSizes {
		if b < 1 || b > 100_000 {
			return fmt.Errorf("batch size %d out of range 1..100000", b)
		}
	}
	return nil
}

func isScenario(s string) bool {
	return slices.Contains(Scenarios, s) || slices.Contains(ExtraScenarios, s)
}

// ExpandScenarios replaces "all" by every scenario and drops repeats.
func ExpandScenarios(args []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, a := range args {
		if a == "all" {
			for _, s := range Scenarios {
				add(s)
			}
			continue
		}
		add(a)
	}
	return out
}

// IntList is a flag.Value for a comma-separated list of integers ("0,1,2").
type IntList []int

func (l *IntList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// Set replaces the list (a flag given twice keeps the last value).
func (l *IntList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("not a comma-separated list of integers: %q", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// StringList is a flag.Value for a comma-separated list of names.
type StringList []string

func (l *StringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Set replaces the list; empty items are dropped.
func (l *StringList) Set(v string) error {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	*l = out
	return nil
}

// TargetList is a repeatable flag.Value for --target
// name=memcache_addr[,http=addr].
type TargetList []Target

func (l *TargetList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, t := range *l {
		s[i] = t.String()
	}
	return strings.Join(s, " ")
}

// Set appends one target.
func (l *TargetList) Set(v string) error {
	t, err := ParseTarget(v)
	if err != nil {
		return err
	}
	*l = append(*l, t)
	return nil
}
