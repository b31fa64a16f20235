package bridge_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/bridge"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

// serveRoot serves a root on a fresh store over HTTP and returns a client of it.
func serveRoot(t *testing.T) *client.Client {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	st, err := store.Open(store.Options{Name: "default", Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(httpapi.New(httpapi.DefaultConfig(), service.Databases{st.Name(): {Name: st.Name(), Store: st}}, quiet))
	t.Cleanup(srv.Close)
	c, err := client.New([]string{srv.URL}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const source = "test source"

func commit(ctx context.Context, w *bridge.Writer, key, pos string) error {
	_, err := w.Commit(ctx, []client.Op{{Key: key, Value: []byte(pos)}}, bridge.State{Source: source, Position: pos, Copied: true})
	return err
}

func load(t *testing.T, w *bridge.Writer) bridge.State {
	t.Helper()
	st, _, err := w.Load(context.Background(), source)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLateWriteOfAStoppedBridge: a bridge killed with a write in flight
// is replaced by one that reads the state before that write lands. The
// new bridge's first write then finds the state key moved: it is told to
// resume from the stored position (ErrStateMoved), not stopped as if a
// second bridge were running, and after loading again it goes on.
func TestLateWriteOfAStoppedBridge(t *testing.T) {
	ctx := context.Background()
	c := serveRoot(t)
	old := bridge.NewWriter(c, "_bridge/s")
	load(t, old)
	if err := commit(ctx, old, "k", "1"); err != nil {
		t.Fatal(err)
	}

	next := bridge.NewWriter(c, "_bridge/s") // the restarted bridge
	if got := load(t, next); got.Position != "1" {
		t.Fatalf("loaded position %q, want 1", got.Position)
	}
	if err := commit(ctx, old, "k", "2"); err != nil { // the write in flight lands
		t.Fatal(err)
	}
	err := commit(ctx, next, "k", "2")
	if !errors.Is(err, bridge.ErrStateMoved) {
		t.Fatalf("first write after the late one: %v, want ErrStateMoved", err)
	}
	if got := load(t, next); got.Position != "2" {
		t.Fatalf("reloaded position %q, want 2", got.Position)
	}
	if err := commit(ctx, next, "k", "3"); err != nil {
		t.Fatalf("write after reloading: %v", err)
	}

	// Once the new bridge has written, nothing sent before can land: the
	// old writer changing the key now is a second bridge at work.
	if err := commit(ctx, old, "k", "x"); !errors.Is(err, bridge.ErrStateConflict) {
		t.Fatalf("write of a writer overtaken after its own success: %v, want ErrStateConflict", err)
	}
	if got := load(t, next); got.Position != "3" {
		t.Fatalf("position %q after the refused write, want 3", got.Position)
	}
}

// TestTwoBridgesAtOnce: a second writer that keeps changing the state key
// stops the bridge with ErrStateConflict after at most one resume.
func TestTwoBridgesAtOnce(t *testing.T) {
	ctx := context.Background()
	c := serveRoot(t)
	a, b := bridge.NewWriter(c, "_bridge/s"), bridge.NewWriter(c, "_bridge/s")
	load(t, a)
	load(t, b)
	if err := commit(ctx, a, "k", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := commit(ctx, b, "k", "b1"); !errors.Is(err, bridge.ErrStateMoved) {
		t.Fatalf("b's first write: %v, want ErrStateMoved", err)
	}
	load(t, b)
	if err := commit(ctx, a, "k", "a2"); err != nil { // a is still at work
		t.Fatal(err)
	}
	if err := commit(ctx, b, "k", "b2"); !errors.Is(err, bridge.ErrStateConflict) {
		t.Fatalf("b's second refused write: %v, want ErrStateConflict", err)
	}
}
