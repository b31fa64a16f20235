package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/config"
)

// Bad certificate configuration is refused at start with a message naming
// the problem, never silently downgraded to plain TCP.
func TestLoadReplTLSErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for name, tc := range map[string]struct {
		tls  config.TLS
		want string
	}{
		"missing cert file": {config.TLS{Cert: filepath.Join(dir, "nope.pem"), Key: filepath.Join(dir, "nope-key.pem")}, "no such file"},
		"cert not PEM":      {config.TLS{Cert: notPEM, Key: notPEM}, "repl_tls"},
		"missing CA file":   {config.TLS{CA: filepath.Join(dir, "ca.pem")}, "no such file"},
		"CA without certs":  {config.TLS{CA: notPEM}, "no certificate found"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadReplTLS(tc.tls)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
	if r, err := loadReplTLS(config.TLS{}); err != nil || r.server != nil || r.client != nil || r.dial() != nil {
		t.Fatalf("no TLS configured: %+v %v", r, err)
	}
	// cert without key is a configuration error.
	c := config.Default()
	c.ReplTLS = config.TLS{Cert: notPEM}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cert and key go together") {
		t.Fatalf("validate: %v", err)
	}
}
