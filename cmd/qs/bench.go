package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/internal/bench"
)

func init() {
	register("bench", "measure qs against a memcached baseline, side by side", cmdBench)
}

const benchUsage = `usage: qs bench <scenario>... [flags]

Scenarios (see internal/bench/doc.go): readlat, get, write, getput,
propagation, or all; and tiers (a data centre of proxies, relays and
replicas on this machine; needs --spawn, not part of all).

Against servers that already run:
  qs bench readlat get --target qs=127.0.0.1:11311,http=127.0.0.1:8080 --target mc=127.0.0.1:11211 --baseline mc
Starting a qs server and a memcached baseline for this run only (the usual way):
  qs bench all --spawn --markdown --out bench-out/run.json --svg bench-out
The cache tiers of a data centre, on 100,000 keys:
  qs bench tiers --spawn --keys 100000 --markdown --svg bench-out

Flags:
`

func cmdBench(args []string) error {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	targets := (*bench.TargetList)(&cfg.Targets)
	fs.Var(targets, "target", "a running server: name=memcache_addr[,http=addr] (repeatable; memcache_addr may be empty)")
	fs.BoolVar(&cfg.Spawn, "spawn", cfg.Spawn, "start qs (qs serve) and memcached on loopback for this run and stop them at the end")
	fs.BoolVar(&cfg.NoBaseline, "no-baseline", cfg.NoBaseline, "with --spawn: do not start memcached")
	fs.StringVar(&cfg.QSBin, "qs-bin", cfg.QSBin, "qs binary to spawn (default: this executable)")
	fs.StringVar(&cfg.QSConfig, "qs-config", cfg.QSConfig, "configuration file of the spawned qs (its --config; the bench's own flags for data and listeners override it)")
	fs.StringVar(&cfg.MemcachedBin, "memcached-bin", cfg.MemcachedBin, "memcached binary to spawn (default: from PATH, then /usr/bin/memcached)")
	fs.IntVar(&cfg.MemcachedMemMB, "memcached-mem", cfg.MemcachedMemMB, "memory of the spawned memcached, in MB (-m)")
	fs.StringVar(&cfg.WorkDir, "work-dir", cfg.WorkDir, "parent of the spawned qs data directory (default: $TMPDIR or /tmp; use a real disk, not tmpfs)")
	fs.DurationVar(&cfg.SpawnTimeout, "spawn-timeout", cfg.SpawnTimeout, "how long a spawned server may take to start")
	fs.StringVar(&cfg.Baseline, "baseline", cfg.Baseline, "name of the target the others are compared to")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", cfg.AllowRemote, "allow targets that are not on loopback")

	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of each measured phase")
	fs.IntVar(&cfg.Slices, "slices", cfg.Slices, "cut each phase into this many slices that the targets take in turns (1: each target runs the whole phase in one go)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "limit of an HTTP request, and of a memcache request past the end of its phase")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "connections of the get and getput scenarios, HTTP clients of the write scenario")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the random keys and values")
	fs.IntVar(&cfg.ReadLatKeys, "readlat-keys", cfg.ReadLatKeys, "readlat: number of 2-byte keys the reader cycles through")
	fs.Var((*bench.IntList)(&cfg.ReadLatWriters), "readlat-writers", "readlat: writer connections of each phase, comma-separated")
	fs.IntVar(&cfg.ReadLatValueSize, "readlat-value-size", cfg.ReadLatValueSize, "readlat: size of the writers' values in bytes")
	fs.IntVar(&cfg.ReadLatWriteRate, "readlat-write-rate", cfg.ReadLatWriteRate, "readlat: cap on the writes/s of a phase, all writers together (0: each writer writes again as soon as its last value is stored); measures a baseline under the target's write load")
	fs.StringVar(&cfg.ReadLatReader, "readlat-reader", cfg.ReadLatReader, "readlat: how the reader waits for answers: thread (blocked in read(2) on a thread of its own; Linux) or poller (a goroutine in Go's network poller)")
	fs.StringVar(&cfg.ReadLatVia, "readlat-via", cfg.ReadLatVia, "readlat: what the reader reads through: memcache, or http (GET /v1/{db}/keys/{key}; targets without an HTTP address are skipped; the writers still use memcache)")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "get and tiers: number of keys loaded and read (tiers: default 1000000)")
	fs.Var((*bench.StringList)(&cfg.TiersStages), "tiers-stages", "tiers: stages to run, comma-separated (default all: "+tierStageNames()+")")
	fs.Var((*bench.StringList)(&cfg.TiersWorkloads), "tiers-workloads", "tiers: workloads to run, comma-separated (default zipf,regional)")
	fs.DurationVar(&cfg.TiersWarmup, "tiers-warmup", cfg.TiersWarmup, "tiers: how long the readers fill the caches before each measurement")
	fs.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "get, write, getput and propagation: value size in bytes")
	fs.IntVar(&cfg.MultiKeys, "multi-keys", cfg.MultiKeys, "get: keys per multi-get")
	fs.IntVar(&cfg.MultiPct, "multi-pct", cfg.MultiPct, "get: percentage of requests that are multi-gets (the rest are single gets)")
	fs.StringVar(&cfg.GetVia, "get-via", cfg.GetVia, "get: what single gets go through: memcache, or http (GET /v1/{db}/keys/{key}) for targets with an HTTP address, the others still through memcache")
	fs.StringVar(&cfg.LoadVia, "load-via", cfg.LoadVia, "get: load keys via auto (http if the target has it), memcache or http")
	fs.Var((*bench.IntList)(&cfg.BatchSizes), "batch-sizes", "write: operations per batch of each phase, comma-separated")
	fs.IntVar(&cfg.PropagationRate, "propagation-rate", cfg.PropagationRate, "propagation: writes/s of the writer at the chains' roots")
	fs.StringVar(&cfg.DB, "db", cfg.DB, "write, and readlat with --readlat-via http: database of the HTTP API")

	out := fs.String("out", "", "write the full report as JSON to this file")
	markdown := fs.Bool("markdown", false, "print the report as markdown (for docs/benchmarks.md) instead of text tables")
	svgDir := fs.String("svg", "", "write a plot of each scenario (latency CDFs and throughput bars) to DIR/<scenario>.svg")

	// Scenario names and flags may be interleaved.
	var scenarios []string
	rest := args
	for {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		scenarios = append(scenarios, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "keys" {
			cfg.TiersKeys = cfg.Keys
		}
	})
	cfg.Scenarios = bench.ExpandScenarios(scenarios)
	if len(cfg.Scenarios) == 0 {
		fs.Usage()
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	if *svgDir != "" { // fail now rather than after the run
		if err := os.MkdirAll(*svgDir, 0o755); err != nil {
			return fmt.Errorf("--svg: %w", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	rep, runErr := bench.Run(ctx, cfg, benchCommandLine(), logf)
	interrupted := ctx.Err() != nil
	stop() // a second Ctrl-C from here on kills the process
	if rep == nil || (runErr != nil && len(rep.Results) == 0) {
		if interrupted {
			return benchInterrupted{}
		}
		return runErr // nothing measured: the error says why
	}
	if *out != "" {
		if err := writeBenchJSON(*out, rep); err != nil {
			return err
		}
		logf("wrote %s", *out)
	}
	write := rep.WriteText
	if *markdown {
		write = rep.WriteMarkdown
	}
	if err := write(os.Stdout); err != nil {
		return err
	}
	if *svgDir != "" { // after the tables, which a plotting error must not lose
		paths, err := rep.WriteSVGFiles(*svgDir)
		for _, p := range paths {
			logf("wrote %s", p)
		}
		if err != nil {
			return fmt.Errorf("--svg: %w", err)
		}
	}
	switch {
	case rep.Interrupted:
		return benchInterrupted{}
	case runErr != nil:
		return runErr
	case rep.Failures() > 0:
		return fmt.Errorf("%d targets could not run a scenario (see FAILED in the report)", rep.Failures())
	case rep.Errors() > 0:
		return fmt.Errorf("%d requests failed during the run (see ERRORS in the report)", rep.Errors())
	}
	return nil
}

func tierStageNames() string {
	var names []string
	for _, s := range bench.TierStages {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// benchInterrupted exits 130, as a shell does for a command ended by Ctrl-C.
type benchInterrupted struct{}

func (benchInterrupted) Error() string { return "interrupted: the report is partial" }
func (benchInterrupted) ExitCode() int { return 130 }

func writeBenchJSON(path string, rep *bench.Report) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// benchCommandLine returns the command line, quoted for a POSIX shell.
func benchCommandLine() string {
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		if i == 0 {
			a = "qs"
		}
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`|&;<>()*?[]#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args[i] = a
	}
	return strings.Join(args, " ")
}
