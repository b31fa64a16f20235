package config

import (
	"os"
	"time"

	"github.com/quicksilver-kv/qs/internal/api/memcache"
)

// defaultProxyFetchTimeout is proxy_fetch_timeout when unset (the proxy
// store's default), against which the L2 attempt timeout is checked.
const defaultProxyFetchTimeout = 5 * time.Second

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

// connsForOthers is how many of max_http_conns watch streams may not take.
func (c *Config) connsForOthers() int { return min(1024, c.MaxHTTPConns/2) }
