// Package bench is `qs bench`: a rerunnable benchmark that measures a qs
// server and a baseline, memcached, side by side in the same run, on the
// same machine, with the same client.
//
// # Scenarios
//
// Each scenario is a function (ReadLat, Get, Write, GetPut, Propagation,
// Tiers) that runs a list of phases against every target and returns a
// Result.
//
// readlat: one connection gets 20 two-byte keys (with two-byte values) one
// at a time, in a cycle, for --duration, while 0, then 1, then 2 other
// connections set new keys with 40 kB random values as fast as the server
// acknowledges them (each waits for STORED before its next set). It
// reports per phase the reads/s and read latency percentiles, and the
// writers' writes/s, MB/s and latency. It mirrors the test in Cloudflare's
// "Introducing Quicksilver" article, where reads of a few small keys on
// Kyoto Tycoon slowed down as writers were added. The question it answers
// for qs: do reads stay fast while large durable writes are in flight?
// Watch how the read p99 and p99.9 move from the 0-writer phase to the
// others, for qs and for memcached.
//
// The reader waits for each answer in read(2), on a thread of its own
// (--readlat-reader thread, the default on Linux), so that its latencies
// hold the server's delays and one kernel wake-up, not the Go scheduler's
// wake-ups of this process: a goroutine parked in the network poller
// (--readlat-reader poller) is woken by
// the poller's thread, handed to a P, and may need another thread to run
// it, and under load each step waits for a CPU. That tail is the client's
// and is added to both sides of a comparison; it made memcached's p99.9
// with 2 writers look 3× worse than it is (docs/benchmarks.md). The
// writers stay on the poller, as ordinary clients.
//
// --readlat-write-rate N caps the writers at N writes/s in all. Unpaced,
// memcached stores ten times more writes than a durable store and so
// loads the machine far more; run the baseline capped at the rate qs
// reached to compare the read tails under the same write load.
//
// For qs targets with an HTTP address the report also shows what the
// server's storage engine did in each phase, from the difference of its
// /metrics before and after every slice (PhaseEngine): its fsyncs (of the
// log segments, where commits are made durable, and of Pebble's
// write-ahead log; per second, mean time, share over 3 ms) and the bytes
// it wrote to the segments, Pebble's WAL, flushes and compactions, against
// the bytes of values the writers sent. The writers each wait for their
// acknowledgement, so the slow fsyncs set their rate.
//
// get: loads 100k keys ("k%06d", 100-byte values; via HTTP batches when the
// target has an HTTP address, else pipelined memcache sets), reads each
// key once (100-key multi-gets, not measured: the phases measure a server
// in its steady state, with a read cache filled by earlier reads, not its
// first read of each key), then 16 connections do random single gets and 100-key multi-gets (50% each, by
// requests), reported separately as "get" and "mget". This is the read
// path of the edge: throughput (ops/s and keys/s) and latency under
// concurrency. Every returned value is checked against the loaded one.
//
// write: 16 HTTP clients POST /v1/{db}/batch with batches of 1, then of
// 100, new keys, each waiting for {"index":N} before the next. It reports
// batches/s, keys/s, MB/s and batch latency, i.e. what a durable commit
// costs and how well batching amortizes it. memcached has no such API and
// no durability, so this scenario has no baseline; it only runs against
// targets with an HTTP address. Each client checks that the index of its
// batches increases.
//
// getput: cfg.Conns connections each put new keys (100-byte values), one
// at a time, waiting for each answer; then as many get random keys of
// those put, checking every value. Besides the scenario's memcache
// targets it starts the durable peers that are installed (peers.go):
// Redis with appendfsync always and a one-member etcd. qs, Redis and etcd
// answer a put once it is fsynced; memcached, the baseline, does not. The
// notes give qs's put throughput over etcd's and Redis's, same run: what
// group commit buys a durable store.
//
// propagation: the time from a write at the root of a replication chain
// to the write being readable on the leaf two hops down, durable at each
// hop. The scenario starts its own chains: three qs (root, an
// intermediate with --upstream root, a leaf with --upstream intermediate)
// and three redis-server with appendfsync always chained with replicaof
// (the baseline). One writer sets a key at the root at
// --propagation-rate writes/s (default 100) and after each
// acknowledgement gets it on the leaf until it reads the new value:
// "write" is the root's acknowledgement, "visible" the whole trip.
//
// tiers (only when named: "all" leaves it out; needs --spawn): the cache
// tiers of a data centre. It starts a root, loads --keys values of 1 KiB
// (default 1,000,000), and 2 replicas behind a 20 ms round-trip link
// (delayLink: a loopback relay in this process, one per replica for the
// proxies and one for the relays, which counts the connections it
// holds). For each workload (Zipf s = 1.1 over every key; regional: Zipf
// over a twentieth of the keys, 1% uniform outside) and each stage of
// TierStages (replicas, relays, prefetch, l2, transient: each a base stage
// plus the flags it adds) it starts 8 fresh proxies and, if the stage
// has them, 2 relays, reads for --tiers-warmup, then measures for
// --duration: L1 and L1+L2 hit rates and the proxies' fetches from
// their status pages, keys the storage nodes sent from their /metrics,
// the most replica connections held at once by proxies and by relays,
// bytes written to the disk caches, read latency, the load average. The
// report has a row per stage and workload (Result.Tiers) and notes that
// state each target and whether it is met (tierChecks). The workload
// generators, the stage list and the report's arithmetic are pure
// (tiersplan.go).
//
// # Targets and fresh servers
//
// With --spawn, every scenario gets a new qs (`qs serve` with an empty
// temporary data directory, listening on loopback ports it announces on
// stdout) and a new memcached (-m 1024 on a free loopback port); both are
// stopped, and the data directory removed, when the scenario ends, on
// error and on Ctrl-C. Fresh servers make a scenario's numbers independent
// of what ran before it: the readlat writers fill memcached's memory (the
// small items of get would then be evicted and show up as misses) and
// leave compaction work behind in qs. With --target the servers are
// whatever is running; run get before readlat against a memcached, or
// give it memory for both.
//
// Within a phase the targets take turns, in slices (--slices, default 4:
// qs for 5 s of the 20 s phase, then memcached for 5 s, then qs again,
// ...), and each target's slices are merged (histograms included) into
// its phase, so that a slow stretch of the machine (other processes'
// builds and tests on a shared machine) is shared rather than charged to
// one side. Writers never reuse a key across slices. With --slices 1 each
// target runs the whole phase in one go.
//
// # Reading the ratios
//
// For every phase, each target is compared to the baseline: latency ratios
// are target / baseline for p50, p99 and p99.9 (above 1: the target is
// slower), the throughput ratio is target ops/s / baseline ops/s (above 1:
// the target is faster). memcached is the floor: an in-memory cache that
// shares the protocol and the loopback path but keeps no log, no history,
// no durability and no replication. A read ratio near 1 means qs adds
// little to the unavoidable cost of the protocol; a ratio that grows with
// the number of writers means writes get in the way of reads, which is
// what readlat exists to catch. Write ratios in readlat compare a fsynced
// commit with a memory store and are expected to be far from 1; they are
// there for completeness, not as a target.
//
// Tail percentiles need samples: p99.9 of a phase with 2,000 requests is
// decided by the two slowest, and max is a single sample. Prefer longer
// phases (the default is 20s) before reading much into p99.9 and max.
//
// # Plots
//
// --svg DIR writes one self-contained SVG per scenario, DIR/<scenario>.svg
// (ResultSVG), next to the tables. It has a row per kind of request: for
// each phase the latency distribution of every target, from the
// percentiles of its histogram (p50, p90, p99, p99.9 and max; latency on a
// log scale across, the percentile up, with a step per "nine"), then the
// throughput of every target in every phase as bars, with each target's
// throughput ratio to the baseline under the phase's name. A target keeps
// its colour in every plot. A scenario without a successful request has
// no plot.
//
// # Measurement
//
// The client is closed-loop: each connection sends one request, waits for
// the complete reply, checks it, then sends the next. Latency is taken per
// request with time.Now() around it and recorded in per-goroutine
// HdrHistograms (1µs to 60s, 3 significant digits) merged at the end of
// the phase. A closed-loop client slows down with the server, so under
// saturation latencies understate what an open-loop client would see
// ("coordinated omission"); compare targets at the same phase, not
// against an SLO. The memcache client is this package's own, small and
// allocation-free on the read path, so that its cost is low and visible;
// HTTP goes through net/http with keep-alive. Client and servers share the
// machine's CPUs; on a small machine, the client's share is part of what
// is measured (pin with taskset to separate them).
//
// # CPU
//
// For every phase the report also gives the CPU time used (Linux, from
// /proc): by the target's process if this run spawned it, by this tool,
// and by everything else on the machine ("others": other processes, and
// the kernel's work for them). Server CPU per request, and its ratio to
// the baseline's in the same phase, is the figure to compare when the
// machine is shared: unlike throughput and latency it hardly changes when
// other processes take cores away (it does include the kernel's work for
// the server's own syscalls, and cache misses caused by the neighbours).
// "others" says how loaded the machine was while each phase ran, and
// "fsync 4 KiB" how fast the disk was: the median time to write and fsync
// 4 KiB in the spawned servers' work directory, probed just before each
// phase (about 0.25 ms on the 2-core machine of docs/benchmarks.md when
// nothing else writes; other processes' fsyncs multiply it). In
// readlat phases with writers, a request is a read or a write, so the
// per-request figure mixes the two in each target's own proportions.
// The propagation scenario's chains are several processes: its report
// adds the CPU time per write of each (root, intermediate, leaf), of
// the whole chain, and the chain's ratio to the Redis chain's; the root
// alone is the "server" above, the others are part of "others". The
// leaf also answers the reader's gets until each write shows, so its
// share grows with the chain's delay.
//
// Only successful requests count in throughput and latency. Failed
// requests, misses and wrong values are counted by kind, with a first
// example, per phase; a report with errors says so, and `qs bench` then
// exits with status 1. MB is 10^6 bytes of values (keys and protocol
// overhead excluded).
//
// If the qs data directory is on tmpfs, fsync costs nothing and the write
// numbers mean little; the report warns about it (--work-dir moves it).
//
// The tool only talks to loopback addresses unless --allow-remote is
// given.
package bench
