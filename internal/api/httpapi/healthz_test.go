package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

// healthCatalog is a catalog that reports what its unhealthy field says.
type healthCatalog struct {
	service.Databases
	unhealthy atomic.Pointer[[]string]
}

func (c *healthCatalog) Unhealthy() []string {
	if p := c.unhealthy.Load(); p != nil {
		return *p
	}
	return nil
}

// A catalog that reports itself unhealthy (a removed raft member) makes
// /healthz answer 503 with its reasons; healthy again, 200 "ok".
func TestHealthzUnhealthyCatalog(t *testing.T) {
	st := openStore(t, store.Options{})
	cat := &healthCatalog{Databases: service.Databases{"db": {Name: "db", Store: st}}}
	srv := httptest.NewServer(New(Config{}, cat, nil))
	t.Cleanup(srv.Close)
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(); st != 200 || body != "ok" {
		t.Fatalf("healthy: %d %q", st, body)
	}
	why := []string{"database db: this member was removed from the raft membership"}
	cat.unhealthy.Store(&why)
	if st, body := get(); st != http.StatusServiceUnavailable || !strings.Contains(body, why[0]) {
		t.Fatalf("unhealthy: %d %q", st, body)
	}
	cat.unhealthy.Store(nil)
	if st, body := get(); st != 200 || body != "ok" {
		t.Fatalf("healthy again: %d %q", st, body)
	}
}
