// Package config holds the configuration of a qs process: its structs, their
// defaults, their validation and the TOML file format, in one place.
package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
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
