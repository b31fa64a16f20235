// Package config holds the configuration of a qs process: its structs, their
// defaults, their validation and the TOML file format, in one place.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/quicksilver-kv/qs/internal/api/memcache"
	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// Config is the whole configuration of one qs process.
type Config struct {
	// Data is the directory holding one subdirectory per database.
	// Default "./qs-data".
	Data string `toml:"data"`
	// HTTP is the HTTP API address (reads, writes at the root, status,
	// metrics). Default "127.0.0.1:7380".
	HTTP string `toml:"http"`
	// Repl is the replication listener: any node can feed replicas.
	// Default "127.0.0.1:7390"; "off" disables it.
	Repl string `toml:"repl"`
	// ReplTLS secures replication traffic, both the listener and the
	// connections of this node's replicas to their sources.
	ReplTLS TLS `toml:"repl_tls"`
	// ClusterKey is the cluster key file (made by qs cert key): every
	// connection to and from the replication and Raft listeners proves it
	// holds the same key (docs/operations.md, "Security model"). Used
	// with repl_tls, both apply. Default none.
	ClusterKey string `toml:"cluster_key"`
	// RootSigningKey is the root's Ed25519 private key file (made by qs
	// cert sign-key): the root of each database, and every member of an
	// HA root, signs the head of its log with it, so replicas can tell
	// the root's log from a forged one. Only roots hold it. Default none.
	RootSigningKey string `toml:"root_signing_key"`
	// RootPublicKey is the public half of RootSigningKey, given to every
	// node: replicas and proxies then apply only entries a head signed
	// with it vouches for, and forward the heads to their own replicas.
	// Default none: entries are applied once their hash chain checks.
	RootPublicKey string `toml:"root_public_key"`
	// UnhealthyWhenForked makes GET /healthz answer 503 while a replica
	// database of this node is forked (its log differs from its
	// source's; it applies nothing until qs repair), so load balancers
	// send it no reads. Default false: /healthz stays 200 and the status
	// and qs_repl_forked say it.
	UnhealthyWhenForked bool `toml:"unhealthy_when_forked"`
	// Insecure lets the replication and Raft listeners listen beyond
	// loopback without a cluster key or mutual TLS: anyone who reaches
	// them can then write through Raft and read the whole dataset. The
	// process logs a warning every minute while it runs so. Default false:
	// such a process refuses to start.
	Insecure bool `toml:"insecure"`
	// MaxReplConns caps the connections open at once on the replication
	// listener, authenticated or not yet; more are closed at accept.
	// Default 4096.
	MaxReplConns int `toml:"max_repl_conns"`
	// BootstrapRate caps the bytes per second this node sends to
	// bootstrapping replicas, all together. Default 100 MiB/s; -1: no cap.
	BootstrapRate int64 `toml:"bootstrap_rate"`
	// BootstrapLock is the lock file that lets one bootstrap per host run
	// at a time (all qs processes of the host must name the same file).
	// Default qs-bootstrap.lock in the temporary directory.
	BootstrapLock string `toml:"bootstrap_lock"`
	// SnapshotKeep: a snapshot made for bootstrapping is reused for this
	// long and kept this long after its last use, so an interrupted
	// bootstrap resumes. Default 10m.
	SnapshotKeep Duration `toml:"snapshot_keep"`
	// NodeName names this process in status pages, the tree its root
	// shows and the cluster's member lists. Default: the host name.
	NodeName string `toml:"node_name"`
	// DC names this node's data centre in the gossip overlay's member
	// list. Default none.
	DC string `toml:"dc"`
	// Shards is the number of physical shards of this node's data centre
	// (a power of two, at most 1024): the node owns the shard of its
	// NodeName (internal/cache, ShardMap). Default 0: not sharded.
	Shards int `toml:"shards"`
	// Gossip is the address of the gossip overlay (UDP and TCP on one
	// port), through which replicas find their sources (docs/operations.md,
	// "Self-organizing tree"). Default "": no overlay.
	Gossip string `toml:"gossip"`
	// Join lists gossip addresses of members to join the overlay through.
	Join []string `toml:"join"`
	// MaxChildren caps the replicas streaming one database from this node
	// when the overlay is on; one more is refused "full" and looks
	// elsewhere. Default 16. Without the overlay there is no cap.
	MaxChildren int `toml:"max_children"`
	// RelaysPerDC is how many relays the proxies of each database elect
	// in each data centre (flag --relays-per-dc). Default 2.
	RelaysPerDC int `toml:"relays_per_dc"`
	// GossipInterval and ProbeInterval tune the overlay: how often a
	// member passes changes on, and how often it probes another member
	// (one round-trip measurement). Defaults: memberlist's presets
	// (gossip 200ms, 100ms on loopback; probe 1s). Longer intervals cost
	// less CPU per member, for fleets of many small processes on one
	// host, and spread news and detect failures more slowly.
	GossipInterval Duration `toml:"gossip_interval"`
	ProbeInterval  Duration `toml:"probe_interval"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `toml:"log_level"`
	// ShutdownTimeout bounds a graceful shutdown. Default 10s.
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
	// MaxHTTPConns caps concurrent HTTP connections, watch streams
	// included (each holds one). Default 16384; the process needs as many
	// file descriptors, plus its stores' and replication's.
	MaxHTTPConns int `toml:"max_http_conns"`
	// WatchMaxWatchers caps the watch streams served at once, all
	// databases together; more are answered 503 too_many_watchers. It
	// must leave 1024 of max_http_conns (half, when that is under 2048) to
	// other requests, so that watchers never take every connection from
	// readers. Default 10,000, or what max_http_conns leaves.
	WatchMaxWatchers int `toml:"watch_max_watchers"`
	// WatchWriteRate and WatchWriteConcurrency cap the write budget of all
	// watch streams: at most this many writes per second, this many under
	// way at once. Within the cap the rate adapts: it rises while readers
	// are served promptly and is cut when watch delivery slows them (their
	// wake-up delay over WatchWakeDelayTarget), so a storm of changes to
	// many watchers costs delivery delay, not reader latency (see
	// docs/operations.md, Watchers). Defaults 25,000 per CPU (in effect no
	// cap) and one per 4 CPUs (at least one).
	WatchWriteRate        float64 `toml:"watch_write_rate"`
	WatchWriteConcurrency int     `toml:"watch_write_concurrency"`
	// WatchWakeDelayTarget is how late, at the 90th percentile, a request
	// may be picked up while watchers are served before the watch write
	// rate is cut (it is cut too when delivery doubles that delay, at
	// least +200µs, over what it is while no watcher writes). Default 1ms.
	WatchWakeDelayTarget Duration `toml:"watch_wake_delay_target"`
	// HTTPReadHeaderTimeout bounds receiving request headers (slow-loris).
	// Default 5s.
	HTTPReadHeaderTimeout Duration `toml:"http_read_header_timeout"`
	// HTTPIdleTimeout closes idle keep-alive connections. Default 2m.
	HTTPIdleTimeout Duration `toml:"http_idle_timeout"`
	// MemcacheThreads: per database, how many memcached connections at
	// most are served each on a dedicated thread with blocking socket
	// calls, which picks requests up sooner than Go's network poller when
	// writes keep the CPUs busy; later connections use the poller.
	// Default 256; -1: none.
	MemcacheThreads int `toml:"memcache_threads"`
	// MemcacheEventLoops: per database, how many threads serve memcached
	// connections from an epoll loop each, as memcached's worker threads
	// do; they answer gets themselves and hand anything that waits to a
	// goroutine of the connection. When loops serve connections,
	// memcache_threads is not used. Default 2; -1: none.
	MemcacheEventLoops int `toml:"memcache_event_loops"`
	// MemcacheReadNice, below 0, is the nice value of those threads while
	// they serve gets (-20 to 19, lower runs first): reads are then picked
	// up first and get a larger share of the CPUs, at the expense of
	// writes and, on a replica, of applying the log (docs/operations.md,
	// "Reads first"). Needs CAP_SYS_NICE or a matching RLIMIT_NICE
	// (systemd: AmbientCapabilities=CAP_SYS_NICE, or LimitNICE=); without
	// it reads keep the process's priority (logged once). Default 0: off.
	MemcacheReadNice int `toml:"memcache_read_nice"`
	// ProducersFile is the producers file of the write gateway (tokens,
	// prefixes, quotas; see internal/gateway), reloaded on SIGHUP and when
	// its content changes. Default none: writes are open to anyone who
	// reaches the HTTP API, for development only.
	ProducersFile string `toml:"producers_file"`

	// Databases served by this process. Default: one named "default".
	Databases []Database `toml:"database"`
}

// Database is the configuration of one database.
type Database struct {
	// Name is used in URLs and directory names: [a-zA-Z0-9_-]{1,64}.
	Name string `toml:"name"`
	// DBID, when set (32 hex digits), pins the database id: a store with
	// another id is refused. Empty: a new database gets a random id.
	DBID string `toml:"db_id"`
	// Memcache lists TCP addresses serving this database over the
	// memcached protocol. Default none; a configuration without any
	// [[database]] gets one database "default" on 127.0.0.1:7311.
	Memcache []string `toml:"memcache"`
	// MemcacheFlushAll allows the memcached command flush_all, which
	// deletes every key of the database in one entry of the log. Default
	// false: flush_all is refused.
	MemcacheFlushAll bool `toml:"memcache_flush_all"`
	// Unix lists Unix socket paths serving the memcached protocol.
	Unix []string `toml:"unix"`
	// Upstream lists the replication addresses (host:port of a --repl
	// listener) this database replicates from, tried in order. Empty: this
	// node is the database's root and accepts writes.
	Upstream []string `toml:"upstream"`
	// Role of a database that replicates: "replica" (default: the whole
	// dataset) or "proxy" (applies the whole log but keeps only recent and
	// recently read values; fetches the others from Replicas). See
	// docs/operations.md, "Proxies".
	Role string `toml:"role"`
	// Replicas (proxy only) are the replication addresses of full
	// replicas to fetch missing values from; the upstream and secondary
	// sources are asked when none can answer.
	Replicas []string `toml:"replicas"`
	// Relay (proxy only, flag --relay) makes this proxy a relay of its
	// data centre: it answers the fetches of the proxies that name it in
	// their Relays, from its cache or by fetching from its Replicas.
	Relay bool `toml:"relay"`
	// Relays (proxy only, flag --relays) are the replication addresses of
	// the relays of this proxy's data centre: misses are fetched through
	// them, and from Replicas (then the upstream sources) only when no
	// relay answers.
	Relays []string `toml:"relays"`
	// ProxyCacheBytes (proxy only, flag --cache-bytes) is the budget of
	// stored values, the window's included. Default 1 GiB.
	ProxyCacheBytes int64 `toml:"proxy_cache_bytes"`
	// ProxyTransientBytes (proxy only, flag --transient-bytes) is the
	// in-memory tier in front of the cache: fetched values are held there
	// and written to the cache only when read again while held. Default
	// 0: none (every fetched value is written).
	ProxyTransientBytes int64 `toml:"proxy_transient_bytes"`
	// DCPeers (proxy only, flag --dc-peers) are the replication addresses
	// of the proxies of this node's data centre (its own may be among
	// them): the L2 cache. A value this proxy does not hold is asked of
	// the peer owning its key's shard (Shards, by node name) before the
	// relays and replicas. Needs Shards of at least 2.
	DCPeers []string `toml:"dc_peers"`
	// ProxyShardCacheBytes (proxy only, flag --shard-cache-bytes) is the
	// in-memory budget of the values of this node's own shard, which it
	// answers to its DCPeers. Default 0: none.
	ProxyShardCacheBytes int64 `toml:"proxy_shard_cache_bytes"`
	// ProxyL2AttemptTimeout (proxy with DCPeers, flag --l2-attempt-timeout)
	// bounds one request to the peer owning a key's shard; a peer that has
	// not answered by then is sidelined and the miss fetched from the
	// relays or replicas. Default 100ms; 1ms to 10s, and below
	// proxy_fetch_timeout.
	ProxyL2AttemptTimeout Duration `toml:"proxy_l2_attempt_timeout"`
	// ProxyL2SidelineMin and ProxyL2SidelineMax (flags --l2-sideline,
	// --l2-sideline-max) bound the time a failed L2 peer is left out: the
	// first, doubled at each failure in a row up to the second. Defaults
	// 200ms (1ms to 1m) and 10s (the first to 1h).
	ProxyL2SidelineMin Duration `toml:"proxy_l2_sideline_min"`
	ProxyL2SidelineMax Duration `toml:"proxy_l2_sideline_max"`
	// ProxyShardWarmRate (proxy with a shard budget and shards of at
	// least 2, flag --shard-warm-rate) is the most values a second the
	// proxy fetches in the background to fill its shard budget with the
	// values of its shard it does not hold. Default 0: 5000; -1: no
	// warm-up (the budget fills from reads and the prefetch stream only);
	// at most 1000000.
	ProxyShardWarmRate int `toml:"proxy_shard_warm_rate"`
	// ProxyWindow (proxy only, flag --window) is the sliding window in log
	// entries: values written by the last ProxyWindow entries are never
	// evicted, so replicas lagging less than that behind the proxy can
	// serve its misses. Default 10000.
	ProxyWindow int64 `toml:"proxy_window"`
	// ProxySoftFreeBytes: below this much free disk, a proxy evicts
	// values beyond its budget. Default 1 GiB.
	ProxySoftFreeBytes uint64 `toml:"proxy_soft_free_bytes"`
	// ProxyHardFreeBytes: below this much free disk, a proxy admits no
	// fetched value (reads keep working by fetching). Default 512 MiB;
	// at least min_free_bytes.
	ProxyHardFreeBytes uint64 `toml:"proxy_hard_free_bytes"`
	// ProxyFetchTimeout bounds fetching a read's missing values, retries
	// included. Default 5s.
	ProxyFetchTimeout Duration `toml:"proxy_fetch_timeout"`
	// ProxyAttemptTimeout: a replica that sends no byte for this long
	// while a fetch waits on it counts as stalled (the fetch is retried
	// elsewhere, the replica sidelined). Default 1s.
	ProxyAttemptTimeout Duration `toml:"proxy_attempt_timeout"`
	// ProxyMinFetchRate (bytes/s): a fetch may take proxy_attempt_timeout
	// plus its expected value bytes at this rate before its replica counts
	// as too slow. Default 1 MiB/s.
	ProxyMinFetchRate int64 `toml:"proxy_min_fetch_rate"`
	// HistoryRetention (full nodes) keeps overwritten and deleted values
	// this long (by the log's clock) for proxies reading as of an earlier
	// index. Default 2h; negative disables the history.
	HistoryRetention Duration `toml:"history_retention"`
	// HistoryMaxBytes caps the history; the oldest versions go first.
	// Default 1 GiB; negative: no cap.
	HistoryMaxBytes int64 `toml:"history_max_bytes"`
	// Secondary lists sources used when no upstream can serve (nodes that
	// keep a long log, retain_age = "168h").
	Secondary []string `toml:"secondary"`
	// ReplIdleTimeout: nothing (no byte) from the source for this long
	// means it is stuck; the replica moves to the next source. Default 30s.
	ReplIdleTimeout Duration `toml:"repl_idle_timeout"`
	// BootstrapMinEntries: a new replica whose source is more than this
	// many entries ahead bootstraps from a snapshot rather than replaying
	// the log. Default 10000 (proxies: -1); -1: only when the source lacks
	// the log.
	BootstrapMinEntries int64 `toml:"bootstrap_min_entries"`

	// Discover makes the database a replica (or, with role = "proxy", a
	// proxy) that finds its sources through the gossip overlay (gossip
	// and join): the nearest member with room, never one of its own
	// descendants. Configured upstream or secondary sources take
	// precedence. Default false.
	Discover bool `toml:"discover"`
	// Bridged makes this root the bridged copy of another root's database
	// (`qs bridge qs`): it appends only the entries the bridge brings,
	// verbatim, so its log stays the source's (same entries at the same
	// indexes, same hash chain), refuses ordinary writes and writes no
	// heartbeats of its own. Needs db_id: the source's database id.
	// Default false.
	Bridged bool `toml:"bridged"`

	// Heartbeat is how often the root writes a heartbeat entry when no
	// other entry was written. Default 1s; negative disables.
	Heartbeat Duration `toml:"heartbeat"`
	// BatchWindow: see store.Options.BatchWindow. Default 0.
	BatchWindow Duration `toml:"batch_window"`
	// Compression of log blocks: zstd (default), snappy or none.
	Compression string `toml:"compression"`
	// Limits; 0 means the store default (see store.Options).
	MaxKeyBytes   int    `toml:"max_key_bytes"`
	MaxValueBytes int    `toml:"max_value_bytes"`
	MaxBatchOps   int    `toml:"max_batch_ops"`
	ChunkBytes    int    `toml:"chunk_bytes"`
	MinFreeBytes  uint64 `toml:"min_free_bytes"`
	BallastBytes  int64  `toml:"ballast_bytes"`
	CacheBytes    int64  `toml:"cache_bytes"`
	// ReadCacheBytes is the in-memory read cache in front of the store
	// (hot keys answered without touching Pebble). Default 64 MiB; -1
	// disables it.
	ReadCacheBytes int64 `toml:"read_cache_bytes"`
	// Retention of the log; 0 means the store default, negative no limit.
	RetainEntries int64    `toml:"retain_entries"`
	RetainBytes   int64    `toml:"retain_bytes"`
	RetainAge     Duration `toml:"retain_age"`

	// Raft makes this node a member of the database's replicated root
	// (docs/operations.md, "Running an HA root"). Unset: a single root
	// (or a replica, with upstream).
	Raft Raft `toml:"raft"`
}

// Raft configures one member of a replicated root. Zero fields take the
// defaults of internal/raftroot.Config.
type Raft struct {
	// NodeID is this member's id (≥ 1), unique in the cluster and never
	// reused. 0: not a member.
	NodeID uint64 `toml:"node_id"`
	// Listen is this member's Raft transport address.
	Listen string `toml:"listen"`
	// Peers lists the initial members as "id=host:port", this one
	// included (the same list on every initial member).
	Peers []string `toml:"peers"`
	// Join: a new member of an existing cluster (added with qs raft add).
	Join bool `toml:"join"`
	// Tick is Raft's clock tick. Default 100ms.
	Tick Duration `toml:"tick"`
	// ElectionTicks: ticks without a leader before an election. Default 10.
	ElectionTicks int `toml:"election_ticks"`
	// SnapshotEntries: applied entries between Raft log compactions.
	// Default 10000.
	SnapshotEntries uint64 `toml:"snapshot_entries"`
	// CatchUpEntries: entries kept after a compaction. Default 5000.
	CatchUpEntries uint64 `toml:"catch_up_entries"`
	// ProposalTimeout bounds a write's wait for a leader and its commit.
	// Default 5s.
	ProposalTimeout Duration `toml:"proposal_timeout"`
}

// Enabled reports whether the database is a member of a replicated root.
func (r Raft) Enabled() bool { return r.NodeID != 0 }

// ParsePeers parses "id=host:port" items.
func ParsePeers(items []string) (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, it := range items {
		id, addr, ok := strings.Cut(strings.TrimSpace(it), "=")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil || n == 0 || addr == "" {
			return nil, fmt.Errorf("raft peer %q: want id=host:port with id ≥ 1", it)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("raft peer id %d given twice", n)
		}
		out[n] = addr
	}
	return out, nil
}

// TLS names the certificate files of a node. With Cert and Key set the
// replication listener speaks TLS and replicas present that certificate;
// with CA set, peers are verified against it, and the listener requires
// clients to present a certificate it signed (mutual TLS). Replicas of a
// TLS source must have CA (or the system roots must trust the source).
type TLS struct {
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	CA   string `toml:"ca"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

// MutualTLS reports whether t authenticates both sides: a certificate
// to present and a CA to verify peers with.
func (t TLS) MutualTLS() bool { return t.Cert != "" && t.Key != "" && t.CA != "" }

// InternalListens lists the addresses of the internal listeners
// (replication and Raft), which carry the whole dataset and the cluster's
// writes.
func (c *Config) InternalListens() []string {
	var out []string
	if c.Repl != "off" {
		out = append(out, c.Repl)
	}
	for _, d := range c.Databases {
		if d.Raft.Enabled() {
			out = append(out, d.Raft.Listen)
		}
	}
	return out
}

// maxShardWarmRate bounds proxy_shard_warm_rate: a million 1 KiB values
// a second is a gigabyte a second of fetches.
const maxShardWarmRate = 1_000_000

// defaultProxyFetchTimeout is proxy_fetch_timeout when unset (the proxy
// store's default), against which the L2 attempt timeout is checked.
const defaultProxyFetchTimeout = 5 * time.Second

// Duration is a time.Duration written as a Go duration string ("1.5s").
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// hostName is the default node name: the host name, or "qs" when the
// system has none to give.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "qs"
}

// Default returns the configuration of `qs serve` with no arguments.
func Default() *Config {
	c := &Config{}
	c.EnsureDefaults()
	return c
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Data == "" {
		c.Data = "./qs-data"
	}
	if c.HTTP == "" {
		c.HTTP = "127.0.0.1:7380"
	}
	if c.Repl == "" {
		c.Repl = "127.0.0.1:7390"
	}
	if c.NodeName == "" {
		c.NodeName = hostName()
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.MaxChildren == 0 {
		c.MaxChildren = 16
	}
	if c.RelaysPerDC == 0 {
		c.RelaysPerDC = 2
	}
	if c.BootstrapRate == 0 {
		c.BootstrapRate = 100 << 20
	}
	if c.MaxReplConns == 0 {
		c.MaxReplConns = 4096
	}
	if c.SnapshotKeep.Duration == 0 {
		c.SnapshotKeep.Duration = 10 * time.Minute
	}
	if c.ShutdownTimeout.Duration == 0 {
		c.ShutdownTimeout.Duration = 10 * time.Second
	}
	if c.MaxHTTPConns == 0 {
		c.MaxHTTPConns = 16384
	}
	if c.WatchMaxWatchers == 0 {
		c.WatchMaxWatchers = max(1, min(10_000, c.MaxHTTPConns-c.connsForOthers()))
	}
	if c.MemcacheThreads == 0 {
		c.MemcacheThreads = memcache.DefaultConfig().Threads
	}
	if c.MemcacheEventLoops == 0 {
		c.MemcacheEventLoops = memcache.DefaultConfig().EventLoops
	}
	if c.HTTPReadHeaderTimeout.Duration == 0 {
		c.HTTPReadHeaderTimeout.Duration = 5 * time.Second
	}
	if c.HTTPIdleTimeout.Duration == 0 {
		c.HTTPIdleTimeout.Duration = 2 * time.Minute
	}
	if len(c.Databases) == 0 {
		c.Databases = []Database{{Name: "default", Memcache: []string{"127.0.0.1:7311"}}}
	}
	for i := range c.Databases {
		d := &c.Databases[i]
		if d.Heartbeat.Duration == 0 {
			d.Heartbeat.Duration = time.Second
		}
		if d.Compression == "" {
			d.Compression = "zstd"
		}
		if d.ReplIdleTimeout.Duration == 0 {
			d.ReplIdleTimeout.Duration = 30 * time.Second
		}
	}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Validate reports every problem in the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	names := map[string]bool{}
	addrs := map[string]string{}
	claim := func(addr, who string) {
		if addr == "" {
			return
		}
		if prev, ok := addrs[addr]; ok && !isPortZero(addr) {
			errs = append(errs, fmt.Errorf("address %s used by both %s and %s", addr, prev, who))
		}
		addrs[addr] = who
	}
	if c.Shards != 0 {
		if _, err := cache.NewShardMap(c.Shards); err != nil {
			errs = append(errs, fmt.Errorf("shards: %d is not a power of two from 1 to %d", c.Shards, cache.LogicalShards))
		}
	}
	claim(c.HTTP, "http")
	claim(c.Gossip, "gossip")
	if c.Repl != "off" {
		claim(c.Repl, "repl")
	}
	for i, d := range c.Databases {
		where := fmt.Sprintf("database[%d] %q", i, d.Name)
		if !nameRE.MatchString(d.Name) {
			errs = append(errs, fmt.Errorf("%s: name must match %s", where, nameRE))
		}
		if names[d.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate name", where))
		}
		names[d.Name] = true
		if d.DBID != "" {
			if _, err := store.ParseDBID(d.DBID); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", where, err))
			}
		}
		if _, err := wal.ParseCompression(d.Compression); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", where, err))
		}
		for _, a := range d.Memcache {
			claim(a, where+" memcache")
		}
		if d.ReplIdleTimeout.Duration < 0 {
			errs = append(errs, fmt.Errorf("%s: repl_idle_timeout must be positive", where))
		}
		for _, a := range d.Unix {
			claim("unix:"+a, where+" unix")
		}
		if _, err := c.StoreOptions(d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", where, err))
		}
		switch d.Role {
		case "", "replica":
			if len(d.Replicas) > 0 {
				errs = append(errs, fmt.Errorf("%s: replicas are for role = \"proxy\"", where))
			}
			if d.Relay || len(d.Relays) > 0 {
				errs = append(errs, fmt.Errorf("%s: relay and relays are for role = \"proxy\"", where))
			}
			if len(d.DCPeers) > 0 || d.ProxyShardCacheBytes != 0 {
				errs = append(errs, fmt.Errorf("%s: dc_peers and proxy_shard_cache_bytes are for role = \"proxy\"", where))
			}
			if d.ProxyL2AttemptTimeout.Duration != 0 || d.ProxyL2SidelineMin.Duration != 0 || d.ProxyL2SidelineMax.Duration != 0 || d.ProxyShardWarmRate != 0 {
				errs = append(errs, fmt.Errorf("%s: proxy_l2_attempt_timeout, proxy_l2_sideline_min/max and proxy_shard_warm_rate are for role = \"proxy\"", where))
			}
		case "proxy":
			if !d.IsReplica() {
				errs = append(errs, fmt.Errorf("%s: a proxy needs an upstream to replicate the log from", where))
			}
			if d.ProxyShardCacheBytes < 0 {
				errs = append(errs, fmt.Errorf("%s: proxy_shard_cache_bytes %d below 0", where, d.ProxyShardCacheBytes))
			}
			if len(d.DCPeers) > 0 && c.Shards < 2 {
				errs = append(errs, fmt.Errorf("%s: dc_peers need shards of at least 2 (the keys of a shard are asked of the peer owning it)", where))
			}
			if d.Relay && len(d.Replicas) == 0 {
				errs = append(errs, fmt.Errorf("%s: a relay needs replicas to fetch from", where))
			}
			if t := d.ProxyAttemptTimeout.Duration; t != 0 && t < time.Millisecond {
				errs = append(errs, fmt.Errorf("%s: proxy_attempt_timeout %v below 1ms", where, t))
			}
			if d.ProxyMinFetchRate < 0 {
				errs = append(errs, fmt.Errorf("%s: proxy_min_fetch_rate %d is negative", where, d.ProxyMinFetchRate))
			}
			if r := d.ProxyShardWarmRate; r < -1 || r > maxShardWarmRate {
				errs = append(errs, fmt.Errorf("%s: proxy_shard_warm_rate %d: want -1 (off), 0 (the default) or up to %d values a second", where, r, maxShardWarmRate))
			}
			if err := cache.CheckL2Timing(d.ProxyL2AttemptTimeout.Duration, d.ProxyL2SidelineMin.Duration, d.ProxyL2SidelineMax.Duration,
				cmp.Or(d.ProxyFetchTimeout.Duration, defaultProxyFetchTimeout)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v (proxy_l2_attempt_timeout, proxy_l2_sideline_min, proxy_l2_sideline_max)", where, err))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: role %q: want replica or proxy", where, d.Role))
		}
		if d.Bridged {
			switch {
			case d.IsReplica():
				errs = append(errs, fmt.Errorf("%s: a bridged database is a root: it cannot have upstream or secondary sources, nor discover them", where))
			case d.Raft.Enabled():
				errs = append(errs, fmt.Errorf("%s: a bridged database cannot be a raft member: the bridge feeds one root", where))
			case d.DBID == "":
				errs = append(errs, fmt.Errorf("%s: bridged needs db_id, the database id of the source (\"db_id\" in GET /v1/DB/status of the source)", where))
			}
		}
		if r := d.Raft; r.Enabled() || r.Listen != "" || len(r.Peers) > 0 {
			peers, err := ParsePeers(r.Peers)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %v", where, err))
			case !r.Enabled():
				errs = append(errs, fmt.Errorf("%s: raft settings without a node id (--node-id)", where))
			case r.Listen == "":
				errs = append(errs, fmt.Errorf("%s: raft needs a listen address (--raft)", where))
			case d.IsReplica():
				errs = append(errs, fmt.Errorf("%s: a raft member is a root: it cannot have upstream or secondary sources, nor discover them", where))
			case c.Repl == "off":
				errs = append(errs, fmt.Errorf("%s: a raft member needs its replication listener (repl): members that fall behind fetch snapshots through it", where))
			case !r.Join && peers[r.NodeID] == "":
				errs = append(errs, fmt.Errorf("%s: raft peers must include this node (%d=%s)", where, r.NodeID, r.Listen))
			}
			claim(r.Listen, where+" raft")
		}
	}
	errs = append(errs, c.validateGossip()...)
	if t := c.ReplTLS; t.Enabled() && (t.Cert == "") != (t.Key == "") {
		errs = append(errs, errors.New("repl_tls: cert and key go together"))
	}
	if c.BootstrapRate < -1 {
		errs = append(errs, errors.New("bootstrap_rate must be positive, or -1 for no limit"))
	}
	if c.SnapshotKeep.Duration < time.Second {
		errs = append(errs, errors.New("snapshot_keep must be at least 1s"))
	}
	if c.MaxReplConns < 1 {
		errs = append(errs, errors.New("max_repl_conns must be at least 1"))
	}
	if c.MaxHTTPConns < 1 {
		errs = append(errs, errors.New("max_http_conns must be at least 1"))
	}
	if others := c.connsForOthers(); c.WatchMaxWatchers < 1 || c.WatchMaxWatchers > c.MaxHTTPConns-others {
		errs = append(errs, fmt.Errorf("watch_max_watchers %d: want 1 to %d, leaving %d of max_http_conns %d to other requests",
			c.WatchMaxWatchers, c.MaxHTTPConns-others, others, c.MaxHTTPConns))
	}
	if c.WatchWriteRate < 0 || c.WatchWriteConcurrency < 0 || c.WatchWakeDelayTarget.Duration < 0 {
		errs = append(errs, errors.New("watch_write_rate, watch_write_concurrency and watch_wake_delay_target must be positive (0: the default)"))
	}
	if c.MemcacheThreads < -1 {
		errs = append(errs, fmt.Errorf("memcache_threads %d: want -1 (none) or more", c.MemcacheThreads))
	}
	if n := c.MemcacheEventLoops; n < -1 || n > 64 {
		errs = append(errs, fmt.Errorf("memcache_event_loops %d: want -1 (none) or up to 64", n))
	}
	if n := c.MemcacheReadNice; n < -20 || n > 19 {
		errs = append(errs, fmt.Errorf("memcache_read_nice %d: want -20 to 19", n))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// validateGossip checks the overlay's settings.
func (c *Config) validateGossip() []error {
	var errs []error
	if c.MaxChildren < 1 {
		errs = append(errs, fmt.Errorf("max_children %d: want at least 1", c.MaxChildren))
	}
	if c.RelaysPerDC < 1 {
		errs = append(errs, fmt.Errorf("relays_per_dc %d: want at least 1", c.RelaysPerDC))
	}
	if c.GossipInterval.Duration < 0 || c.ProbeInterval.Duration < 0 {
		errs = append(errs, fmt.Errorf("gossip_interval %v, probe_interval %v: want positive durations (or none: the defaults)", c.GossipInterval.Duration, c.ProbeInterval.Duration))
	}
	for i, d := range c.Databases {
		if d.Discover && (c.Gossip == "" || len(c.Join) == 0) && len(d.Upstream)+len(d.Secondary) == 0 {
			errs = append(errs, fmt.Errorf("database[%d] %q: discover needs the gossip overlay: gossip (--gossip) and members to join (--join)", i, d.Name))
		}
	}
	if c.Gossip == "" {
		if len(c.Join) > 0 {
			errs = append(errs, errors.New("join needs a gossip address (--gossip)"))
		}
		return errs
	}
	host, _, err := net.SplitHostPort(c.Gossip)
	if err != nil {
		return append(errs, fmt.Errorf("gossip %q: %v", c.Gossip, err))
	}
	if ip := net.ParseIP(host); c.ClusterKey == "" && !c.Insecure && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		errs = append(errs, fmt.Errorf("gossip %s is not a loopback address: the overlay needs cluster_key (--cluster-key), or insecure (--insecure) on a trusted network", c.Gossip))
	}
	return errs
}

// connsForOthers is how many of max_http_conns watch streams may not take.
func (c *Config) connsForOthers() int { return min(1024, c.MaxHTTPConns/2) }

// WatchLimits returns the limits of the process's watch streams (zero
// fields: the watch package's defaults).
func (c *Config) WatchLimits() watch.Limits {
	return watch.Limits{MaxWatchers: c.WatchMaxWatchers, WriteRate: c.WatchWriteRate, WriteConcurrency: c.WatchWriteConcurrency,
		WakeDelayTarget: c.WatchWakeDelayTarget.Duration}
}

func isPortZero(addr string) bool {
	return len(addr) >= 2 && addr[len(addr)-2:] == ":0"
}

// IsReplica reports whether the database replicates from other nodes
// (as a replica or a proxy).
func (d Database) IsReplica() bool { return len(d.Upstream)+len(d.Secondary) > 0 || d.Discover }

// IsStatic reports whether a replica has configured sources (which take
// precedence over discovery).
func (d Database) IsStatic() bool { return len(d.Upstream)+len(d.Secondary) > 0 }

// IsProxy reports whether the database is a proxy.
func (d Database) IsProxy() bool { return d.Role == "proxy" }

// RoleName is "root", "bridged" (a root fed by qs bridge qs), "replica"
// or "proxy".
func (d Database) RoleName() string {
	switch {
	case d.Bridged && !d.IsReplica():
		return "bridged"
	case !d.IsReplica():
		return "root"
	case d.IsProxy():
		return "proxy"
	}
	return "replica"
}

// Proxy log retention defaults: a proxy's log serves watchers resuming and
// nothing else, so it is kept short (the disk is what a proxy saves).
const (
	proxyRetainBytes = 16 << 20
	proxyRetainAge   = time.Hour
)

// StoreOptions converts a database's configuration to store options.
func (c *Config) StoreOptions(d Database) (store.Options, error) {
	comp, err := wal.ParseCompression(d.Compression)
	if err != nil {
		return store.Options{}, err
	}
	o := store.Options{
		Name:          d.Name,
		Dir:           filepath.Join(c.Data, d.Name),
		MaxKeyBytes:   d.MaxKeyBytes,
		MaxValueBytes: d.MaxValueBytes,
		MaxBatchOps:   d.MaxBatchOps,
		ChunkBytes:    d.ChunkBytes,
		BatchWindow:   d.BatchWindow.Duration,
		Compression:   comp,
		Retention: store.Retention{
			MaxEntries: d.RetainEntries, MaxBytes: d.RetainBytes, MaxAge: d.RetainAge.Duration,
		},
		MinFreeBytes:   d.MinFreeBytes,
		BallastBytes:   d.BallastBytes,
		CacheBytes:     d.CacheBytes,
		ReadCacheBytes: d.ReadCacheBytes,
		History:        store.HistoryOptions{Retention: d.HistoryRetention.Duration, MaxBytes: d.HistoryMaxBytes},
	}
	if d.IsProxy() {
		o.Proxy = &store.ProxyOptions{Window: d.ProxyWindow, CacheBytes: d.ProxyCacheBytes,
			SoftFreeBytes: d.ProxySoftFreeBytes, HardFreeBytes: d.ProxyHardFreeBytes, FetchTimeout: d.ProxyFetchTimeout.Duration,
			TransientBytes: d.ProxyTransientBytes, ShardCacheBytes: d.ProxyShardCacheBytes, NodeName: c.NodeName}
		if c.Shards > 0 {
			if o.Proxy.Shards, err = cache.NewShardMap(c.Shards); err != nil {
				return o, err
			}
		}
		if o.Retention.MaxEntries == 0 {
			o.Retention.MaxEntries = max(d.ProxyWindow, 10000)
		}
		if o.Retention.MaxBytes == 0 {
			o.Retention.MaxBytes = proxyRetainBytes
		}
		if o.Retention.MaxAge == 0 {
			o.Retention.MaxAge = proxyRetainAge
		}
	}
	if d.DBID != "" {
		if o.DBID, err = store.ParseDBID(d.DBID); err != nil {
			return o, err
		}
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return o, err
	}
	if p := o.Proxy; p != nil && p.HardFreeBytes < o.MinFreeBytes {
		return o, fmt.Errorf("proxy_hard_free_bytes %d below min_free_bytes %d: admissions must stop before writes do", p.HardFreeBytes, o.MinFreeBytes)
	}
	return o, nil
}

// Load reads a TOML file, refusing unknown keys, and applies defaults.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b, path)
}

// Parse parses TOML text (name is used in errors).
func Parse(b []byte, name string) (*Config, error) {
	c := &Config{}
	md, err := toml.Decode(string(b), c)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("config %s: unknown keys %v", name, und)
	}
	c.EnsureDefaults()
	return c, nil
}
