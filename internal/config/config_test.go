package config

import (
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Data != "./qs-data" || c.HTTP != "127.0.0.1:7380" || len(c.Databases) != 1 ||
		c.Databases[0].Name != "default" || c.Databases[0].Memcache[0] != "127.0.0.1:7311" ||
		c.Databases[0].Heartbeat.Duration != time.Second {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if c.MaxHTTPConns != 16384 || c.WatchMaxWatchers != 10_000 {
		t.Fatalf("connections %d, watchers %d", c.MaxHTTPConns, c.WatchMaxWatchers)
	}
	// With fewer connections, watchers get what the others leave.
	for conns, watchers := range map[int]int{4096: 3072, 1000: 500, 1: 1} {
		c := &Config{MaxHTTPConns: conns}
		c.EnsureDefaults()
		if c.WatchMaxWatchers != watchers {
			t.Fatalf("max_http_conns %d: watch_max_watchers %d, want %d", conns, c.WatchMaxWatchers, watchers)
		}
	}
	if c.MemcacheThreads != 256 || c.MemcacheReadNice != 0 {
		t.Fatalf("memcache threads %d, read nice %d", c.MemcacheThreads, c.MemcacheReadNice)
	}
	set, err := Parse([]byte("memcache_read_nice = -5\nmemcache_threads = -1"), "test")
	if err != nil || set.MemcacheReadNice != -5 || set.MemcacheThreads != -1 || set.Validate() != nil {
		t.Fatalf("memcache_read_nice = -5, memcache_threads = -1: %+v, %v", set, err)
	}
	o, err := c.StoreOptions(c.Databases[0])
	if err != nil || o.Dir != "qs-data/default" {
		t.Fatalf("store options %+v %v", o, err)
	}
}

func TestParse(t *testing.T) {
	c, err := Parse([]byte(`
data = "/var/lib/qs"
http = "127.0.0.1:0"
[[database]]
name = "dns"
memcache = ["127.0.0.1:0"]
batch_window = "2ms"
compression = "snappy"
retain_age = "168h"
[[database]]
name = "waf"
unix = ["/run/qs/waf.sock"]
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Databases[0].BatchWindow.Duration != 2*time.Millisecond || c.Databases[0].RetainAge.Duration != 168*time.Hour {
		t.Fatalf("durations: %+v", c.Databases[0])
	}
	if len(c.Databases[1].Memcache) != 0 {
		t.Fatal("second database got a default memcache address")
	}
}

func TestProxyAndHistoryOptions(t *testing.T) {
	c, err := Parse([]byte(`
[[database]]
name = "p"
role = "proxy"
upstream = ["10.0.0.1:7390"]
replicas = ["10.0.0.2:7390", "10.0.0.3:7390"]
proxy_cache_bytes = 1000000
proxy_window = 500
proxy_l2_attempt_timeout = "20ms"
proxy_l2_sideline_min = "50ms"
proxy_l2_sideline_max = "1m"
proxy_shard_warm_rate = -1
[[database]]
name = "r"
upstream = ["10.0.0.1:7390"]
history_retention = "30m"
history_max_bytes = 123456
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := c.Databases[0]; d.ProxyL2AttemptTimeout.Duration != 20*time.Millisecond || d.ProxyL2SidelineMin.Duration != 50*time.Millisecond || d.ProxyL2SidelineMax.Duration != time.Minute {
		t.Fatalf("L2 timing %v %v %v", d.ProxyL2AttemptTimeout, d.ProxyL2SidelineMin, d.ProxyL2SidelineMax)
	}
	if d := c.Databases[0]; d.ProxyShardWarmRate != -1 {
		t.Fatalf("shard warm rate %d", d.ProxyShardWarmRate)
	}
	p, _ := c.StoreOptions(c.Databases[0])
	if p.Proxy == nil || p.Proxy.Window != 500 || p.Proxy.CacheBytes != 1000000 || p.Retention.MaxEntries != 10000 || p.Retention.MaxBytes != 16<<20 {
		t.Fatalf("proxy options %+v retention %+v", p.Proxy, p.Retention)
	}
	r, _ := c.StoreOptions(c.Databases[1])
	if r.Proxy != nil || r.History.Retention != 30*time.Minute || r.History.MaxBytes != 123456 || r.Retention.MaxBytes != 1<<30 {
		t.Fatalf("replica options %+v", r)
	}
}

func TestParseErrors(t *testing.T) {
	for name, tc := range map[string]struct{ toml, want string }{
		"unknown key":                    {`datta = "x"`, "unknown keys"},
		"bad duration":                   {"[[database]]\nname = \"a\"\nheartbeat = \"soon\"", "soon"},
		"bad syntax":                     {`data = `, "config test"},
		"bad name":                       {"[[database]]\nname = \"a/b\"", "name must match"},
		"duplicate name":                 {"[[database]]\nname = \"a\"\n[[database]]\nname = \"a\"", "duplicate name"},
		"bad db id":                      {"[[database]]\nname = \"a\"\ndb_id = \"xyz\"", "bad database id"},
		"bad compression":                {"[[database]]\nname = \"a\"\ncompression = \"lz4\"", "unknown compression"},
		"address twice":                  {"http = \"127.0.0.1:7000\"\n[[database]]\nname = \"a\"\nmemcache = [\"127.0.0.1:7000\"]", "used by both"},
		"bad log level":                  {`log_level = "loud"`, "log_level"},
		"bad store limit":                {"[[database]]\nname = \"a\"\nchunk_bytes = 10", "ChunkBytes"},
		"window too long":                {"[[database]]\nname = \"a\"\nbatch_window = \"1m\"", "BatchWindow"},
		"watchers take every connection": {"max_http_conns = 4096\nwatch_max_watchers = 4000", "watch_max_watchers 4000: want 1 to 3072"},
		"negative watch rate":            {"watch_write_rate = -1", "watch_write_rate"},
		"negative watch target":          {`watch_wake_delay_target = "-1ms"`, "watch_wake_delay_target"},
		"bad watch target":               {`watch_wake_delay_target = "soon"`, "soon"},
		"bad role":                       {"[[database]]\nname = \"a\"\nrole = \"cache\"\nupstream = [\"h:1\"]", "want replica or proxy"},
		"root proxy":                     {"[[database]]\nname = \"a\"\nrole = \"proxy\"", "needs an upstream"},
		"replicas unused":                {"[[database]]\nname = \"a\"\nupstream = [\"h:1\"]\nreplicas = [\"h:2\"]", "replicas are for"},
		"proxy window":                   {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_window = -5", "window"},
		"relay of a replica":             {"[[database]]\nname = \"a\"\nupstream = [\"h:1\"]\nrelay = true", "relay and relays are for"},
		"relay without replicas":         {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nrelay = true", "a relay needs replicas"},
		"proxy transient tier":           {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_transient_bytes = -1", "transient tier"},
		"dc peers of a replica":          {"[[database]]\nname = \"a\"\nupstream = [\"h:1\"]\ndc_peers = [\"h:2\"]", "dc_peers and proxy_shard_cache_bytes are for"},
		"dc peers without shards":        {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\ndc_peers = [\"h:2\"]", "dc_peers need shards"},
		"proxy shard cache":              {"shards = 4\n[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_shard_cache_bytes = -1", "proxy_shard_cache_bytes -1 below 0"},
		"proxy attempt timeout":          {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_attempt_timeout = \"-1s\"", "proxy_attempt_timeout"},
		"L2 timing of a replica":         {"[[database]]\nname = \"a\"\nupstream = [\"h:1\"]\nproxy_l2_sideline_min = \"1s\"", "proxy_l2_attempt_timeout, proxy_l2_sideline_min/max and proxy_shard_warm_rate are for"},
		"L2 attempt timeout below 1ms":   {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_attempt_timeout = \"500us\"", "L2 attempt timeout 500µs: want 1ms to 10s"},
		"negative L2 attempt timeout":    {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_attempt_timeout = \"-1s\"", "L2 attempt timeout -1s"},
		"L2 attempt timeout above 10s":   {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_attempt_timeout = \"11s\"\nproxy_fetch_timeout = \"1m\"", "want 1ms to 10s"},
		"L2 attempt past fetch timeout":  {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_attempt_timeout = \"6s\"", "below the fetch timeout 5s"},
		"L2 attempt past set fetch":      {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_attempt_timeout = \"2s\"\nproxy_fetch_timeout = \"2s\"", "below the fetch timeout 2s"},
		"L2 sideline above 1m":           {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_sideline_min = \"2m\"\nproxy_l2_sideline_max = \"1h\"", "L2 sideline 2m0s: want 1ms to 1m"},
		"L2 sideline max below min":      {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_sideline_min = \"30s\"", "L2 sideline max 10s: want the sideline (30s) to 1h"},
		"L2 sideline max above 1h":       {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_sideline_max = \"2h\"", "want the sideline (200ms) to 1h"},
		"shard warm rate below -1":       {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_shard_warm_rate = -2", "proxy_shard_warm_rate -2: want -1 (off)"},
		"shard warm rate too high":       {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_shard_warm_rate = 1000001", "proxy_shard_warm_rate 1000001"},
		"shard warm rate of a replica":   {"[[database]]\nname = \"a\"\nupstream = [\"h:1\"]\nproxy_shard_warm_rate = 10", "proxy_shard_warm_rate are for"},
		"bad L2 duration":                {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_l2_sideline_max = \"later\"", "later"},
		"proxy min fetch rate":           {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_min_fetch_rate = -1", "proxy_min_fetch_rate"},
		"memcache threads":               {"memcache_threads = -2", "memcache_threads -2"},
		"shards not a power of two":      {"shards = 6", "shards: 6 is not a power of two"},
		"too many shards":                {"shards = 2048", "shards: 2048 is not a power of two"},
		"memcache read nice":             {"memcache_read_nice = -21", "memcache_read_nice -21"},
		"memcache event loops":           {"memcache_event_loops = 65", "memcache_event_loops 65"},
		"negative memcache event loops":  {"memcache_event_loops = -2", "memcache_event_loops -2"},
		"hard below min":                 {"[[database]]\nname = \"a\"\nrole = \"proxy\"\nupstream = [\"h:1\"]\nproxy_hard_free_bytes = 1000\nproxy_soft_free_bytes = 2000", "below min_free_bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(tc.toml), "test")
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestRaftValidation(t *testing.T) {
	ok := func(r Raft) *Config {
		c := &Config{Databases: []Database{{Name: "db", Raft: r}}}
		c.EnsureDefaults()
		return c
	}
	good := Raft{NodeID: 1, Listen: "127.0.0.1:7400", Peers: []string{"1=127.0.0.1:7400", "2=127.0.0.1:7401"}}
	if err := ok(good).Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		r    Raft
		edit func(*Config)
	}{
		"no node id":     {Raft{Listen: "a:1", Peers: []string{"1=a:1"}}, nil},
		"no listen":      {Raft{NodeID: 1, Peers: []string{"1=a:1"}}, nil},
		"bad peer":       {Raft{NodeID: 1, Listen: "a:1", Peers: []string{"x=a:1"}}, nil},
		"duplicate peer": {Raft{NodeID: 1, Listen: "a:1", Peers: []string{"1=a:1", "1=b:1"}}, nil},
		"self missing":   {Raft{NodeID: 3, Listen: "a:1", Peers: []string{"1=a:1"}}, nil},
		"replica":        {good, func(c *Config) { c.Databases[0].Upstream = []string{"x:1"} }},
		"repl off":       {good, func(c *Config) { c.Repl = "off" }},
		"address reused": {good, func(c *Config) { c.HTTP = "127.0.0.1:7400" }},
	} {
		c := ok(tc.r)
		if tc.edit != nil {
			tc.edit(c)
		}
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	j := good
	j.Join, j.Peers = true, []string{"1=127.0.0.1:7401"}
	if err := ok(j).Validate(); err != nil {
		t.Fatalf("joining member: %v", err)
	}
}

func TestBridgedValidation(t *testing.T) {
	const id = "00112233445566778899aabbccddeeff"
	bridged := func(edit func(d *Database)) error {
		c := &Config{Databases: []Database{{Name: "db", Bridged: true, DBID: id}}}
		c.EnsureDefaults()
		if edit != nil {
			edit(&c.Databases[0])
		}
		return c.Validate()
	}
	if err := bridged(nil); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(d *Database){
		"no db_id":  func(d *Database) { d.DBID = "" },
		"bad db_id": func(d *Database) { d.DBID = "xyz" },
		"replica":   func(d *Database) { d.Upstream = []string{"127.0.0.1:1"} },
		"discover":  func(d *Database) { d.Discover = true },
		"raft": func(d *Database) {
			d.Raft = Raft{NodeID: 1, Listen: "127.0.0.1:7400", Peers: []string{"1=127.0.0.1:7400"}}
		},
	} {
		if err := bridged(edit); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := (Database{Bridged: true}).RoleName(); got != "bridged" {
		t.Errorf("role %q, want bridged", got)
	}
}

func TestWatchLimits(t *testing.T) {
	c, err := Parse([]byte("watch_write_rate = 8000\nwatch_write_concurrency = 2\nwatch_wake_delay_target = \"2ms\""), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	l := c.WatchLimits()
	if l.WriteRate != 8000 || l.WriteConcurrency != 2 || l.WakeDelayTarget != 2*time.Millisecond || l.MaxWatchers != c.WatchMaxWatchers {
		t.Fatalf("watch limits %+v", l)
	}
}

func TestGossipValidation(t *testing.T) {
	base := func(edit func(*Config)) *Config {
		c := &Config{Gossip: "127.0.0.1:7946", Join: []string{"127.0.0.1:7947"}, Databases: []Database{{Name: "db", Discover: true}}}
		edit(c)
		c.EnsureDefaults()
		return c
	}
	for name, edit := range map[string]func(*Config){
		"loopback":             func(c *Config) {},
		"root without join":    func(c *Config) { c.Join = nil; c.Databases[0].Discover = false },
		"keyed on any address": func(c *Config) { c.Gossip = "0.0.0.0:7946"; c.ClusterKey = "/etc/qs/cluster.key" },
		"insecure":             func(c *Config) { c.Gossip = "10.0.0.1:7946"; c.Insecure = true },
		"static wins":          func(c *Config) { c.Gossip, c.Join = "", nil; c.Databases[0].Upstream = []string{"a:1"} },
	} {
		if err := base(edit).Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if c := base(func(*Config) {}); c.RelaysPerDC != 2 {
		t.Errorf("defaults: relays_per_dc %d", c.RelaysPerDC)
	}
	if c := base(func(*Config) {}); c.MaxChildren != 16 || !c.Databases[0].IsReplica() || c.Databases[0].IsStatic() {
		t.Errorf("defaults: max_children %d, replica %v, static %v", c.MaxChildren, c.Databases[0].IsReplica(), c.Databases[0].IsStatic())
	}
	for name, edit := range map[string]func(*Config){
		"open without key":       func(c *Config) { c.Gossip = "0.0.0.0:7946" },
		"bad gossip address":     func(c *Config) { c.Gossip = "7946" },
		"join without gossip":    func(c *Config) { c.Gossip = ""; c.Databases[0].Discover = false },
		"discover without join":  func(c *Config) { c.Join = nil },
		"negative max_children":  func(c *Config) { c.MaxChildren = -1 },
		"negative relays_per_dc": func(c *Config) { c.RelaysPerDC = -1 },
		"negative probe":         func(c *Config) { c.ProbeInterval.Duration = -time.Second },
		"negative gossip":        func(c *Config) { c.GossipInterval.Duration = -time.Second },
		"gossip on http address": func(c *Config) { c.HTTP = "127.0.0.1:7946" },
		"raft member discovers": func(c *Config) {
			c.Databases[0].Raft = Raft{NodeID: 1, Listen: "127.0.0.1:7400", Peers: []string{"1=127.0.0.1:7400"}}
		},
	} {
		if err := base(edit).Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
