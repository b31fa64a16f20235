package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// maxShardWarmRate bounds proxy_shard_warm_rate: a million 1 KiB values
// a second is a gigabyte a second of fetches.
const maxShardWarmRate = 1_000_000

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

func isPortZero(addr string) bool {
	return len(addr) >= 2 && addr[len(addr)-2:] == ":0"
}
