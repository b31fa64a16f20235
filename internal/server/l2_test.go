package server

import (
	"testing"

	"github.com/quicksilver-kv/qs/internal/config"
)

// TestDiscoversDCPeers: a proxy takes its L2 peers from the overlay only
// with the overlay on, no configured dc_peers, a sharded data centre and
// a shard budget of its own.
func TestDiscoversDCPeers(t *testing.T) {
	proxy := config.Database{Name: "default", Role: "proxy", Discover: true, ProxyShardCacheBytes: 1 << 20}
	withPeers := proxy
	withPeers.DCPeers = []string{"127.0.0.1:7390"}
	noBudget := proxy
	noBudget.ProxyShardCacheBytes = 0
	replica := proxy
	replica.Role = "replica"
	for _, c := range []struct {
		what    string
		d       config.Database
		shards  int
		overlay bool
		want    bool
	}{
		{"proxy with overlay, shards and budget", proxy, 4, true, true},
		{"two shards are enough", proxy, 2, true, true},
		{"no overlay", proxy, 4, false, false},
		{"configured dc_peers take precedence", withPeers, 4, true, false},
		{"one shard: nothing to share", proxy, 1, true, false},
		{"no shards", proxy, 0, true, false},
		{"no shard budget: nothing to answer peers", noBudget, 4, true, false},
		{"not a proxy", replica, 4, true, false},
	} {
		if got := discoversDCPeers(c.d, c.shards, c.overlay); got != c.want {
			t.Errorf("%s: discoversDCPeers = %v, want %v", c.what, got, c.want)
		}
	}
}
