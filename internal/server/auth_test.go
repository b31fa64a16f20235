package server

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
)

// Bad certificate or key configuration is refused at start with a message
// naming the problem, never silently downgraded to plain TCP.
func TestLoadAuthErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("0011\n"), 0o600)
	for name, tc := range map[string]struct {
		tls  config.TLS
		key  string
		want string
	}{
		"missing cert file": {tls: config.TLS{Cert: filepath.Join(dir, "nope.pem"), Key: filepath.Join(dir, "nope-key.pem")}, want: "no such file"},
		"cert not PEM":      {tls: config.TLS{Cert: notPEM, Key: notPEM}, want: "repl_tls"},
		"missing CA file":   {tls: config.TLS{CA: filepath.Join(dir, "ca.pem")}, want: "no such file"},
		"CA without certs":  {tls: config.TLS{CA: notPEM}, want: "no certificate found"},
		"missing key file":  {key: filepath.Join(dir, "nope.key"), want: "no such file"},
		"short key":         {key: short, want: "too short"},
	} {
		t.Run(name, func(t *testing.T) {
			c := config.Default()
			c.ReplTLS, c.ClusterKey = tc.tls, tc.key
			_, _, err := loadAuth(c, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
	if a, open, err := loadAuth(config.Default(), nil); err != nil || a.Mode() != "none" || len(open) != 0 {
		t.Fatalf("nothing configured, on loopback: %v %v %v", a.Mode(), open, err)
	}
	// cert without key is a configuration error.
	c := config.Default()
	c.ReplTLS = config.TLS{Cert: notPEM}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cert and key go together") {
		t.Fatalf("validate: %v", err)
	}
}

// A node whose replication or Raft listener is beyond loopback refuses to
// start without a cluster key or mutual TLS, unless insecure is given.
func TestRefusesToListenBeyondLoopbackUnauthenticated(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *config.Config)
	}{
		{"repl on every interface", func(c *config.Config) { c.Repl = "0.0.0.0:0" }},
		{"repl without host", func(c *config.Config) { c.Repl = ":0" }},
		{"raft beyond loopback", func(c *config.Config) {
			c.Databases[0].Raft = config.Raft{NodeID: 1, Listen: "0.0.0.0:0", Peers: []string{"1=0.0.0.0:0"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			c.Data = t.TempDir()
			tc.edit(c)
			if _, err := New(c, slog.New(slog.DiscardHandler), nil); !errors.Is(err, clusterauth.ErrInsecure) {
				t.Fatalf("start: %v, want ErrInsecure", err)
			}
			c.Insecure = true
			_, open, err := loadAuth(c, nil)
			if err != nil || len(open) == 0 {
				t.Fatalf("with insecure: %v %v", open, err)
			}
			c.Insecure = false
			key := filepath.Join(t.TempDir(), "cluster.key")
			os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
			c.ClusterKey = key
			if a, open, err := loadAuth(c, nil); err != nil || len(open) != 0 || a.Mode() != "cluster-key" {
				t.Fatalf("with a cluster key: %v %v", open, err)
			}
		})
	}
}
