package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/api/memcache"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/store"
)

// The producers file is wired from the configuration to every database,
// refuses memcached writes, and an invalid file stops the start.
func TestGatewayWiring(t *testing.T) {
	dir := t.TempDir()
	_, hash := gateway.NewToken()
	producers := filepath.Join(dir, "producers.toml")
	os.WriteFile(producers, []byte(fmt.Sprintf("[[producer]]\nname = \"p\"\ntokens = [%q]\nprefixes = [\"\"]\n", hash)), 0o600)
	cfg, err := config.Parse([]byte(fmt.Sprintf("data = %q\nrepl = \"off\"\nproducers_file = %q\n[[database]]\nname = \"default\"\n", filepath.Join(dir, "data"), producers)), "test")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	s, err := New(cfg, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	db := s.dbs["default"]
	if db.Gate == nil {
		t.Fatal("database without the gateway")
	}
	_, err = memcacheBackend{db: db}.Set(context.Background(), []byte("k"), []byte("v"), memcache.Attrs{})
	if !errors.Is(err, gateway.ErrMemcacheWrite) || !errors.Is(err, store.ErrInvalid) {
		t.Errorf("memcached set with producers: %v", err)
	}
	if changed, err := s.ReloadProducers(); changed || err != nil {
		t.Errorf("reload of an unchanged file: %v %v", changed, err)
	}
	s.closeStores()

	// An invalid file (naming a database not served) stops the start.
	os.WriteFile(producers, []byte(fmt.Sprintf("[[producer]]\nname = \"p\"\ntokens = [%q]\nprefixes = [\"\"]\ndatabases = [\"nope\"]\n", hash)), 0o600)
	if _, err := New(cfg, log, io.Discard); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("start with an invalid producers file: %v", err)
	}

	// No file: open writes.
	cfg.ProducersFile = ""
	s, err = New(cfg, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeStores()
	if s.dbs["default"].Gate != nil {
		t.Error("gateway without producers file")
	}
	if _, err := (memcacheBackend{db: s.dbs["default"]}).Set(context.Background(), []byte("k"), []byte("v"), memcache.Attrs{}); err != nil {
		t.Errorf("memcached set without producers: %v", err)
	}
	if _, err := s.ReloadProducers(); !errors.Is(err, ErrNoProducersFile) {
		t.Errorf("reload without file: %v", err)
	}
}
