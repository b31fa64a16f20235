package repl

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
)

// viewFetcher fetches from a full store in the same process: the version
// current at min(asOf, its applied index), which must be the one asked.
type viewFetcher struct {
	src  *store.Store
	fail atomic.Bool
}

func (f *viewFetcher) Fetch(_ context.Context, asOf uint64, items []store.FetchItem) error {
	if f.fail.Load() {
		return errors.New("no replica answers")
	}
	v, err := f.src.View()
	if err != nil {
		return err
	}
	defer v.Close()
	for i := range items {
		it := &items[i]
		val, idx, found, err := v.GetAt(it.Key, min(asOf, v.Index()))
		if err != nil || !found || idx != it.Index || !it.Check(val) {
			return fmt.Errorf("key %q: version %d found=%v err=%v, want %d", it.Key, idx, found, err, it.Index)
		}
		it.Value = append([]byte(nil), val...)
	}
	return nil
}

// TestRelayAnswersOnlyTheVersionItHolds: a relay answers a fetch from its
// own reads at its applied index A: the version asked if it is the key's
// version at A, else behind, gone or mismatch; error when it cannot read.
func TestRelayAnswersOnlyTheVersionItHolds(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	i1 := writeOps(t, root, setOp("a", "one"), setOp("b", "x"))
	po := store.ProxyOptions{Window: 1, CacheBytes: -1}
	relay, err := store.Open(store.Options{Name: root.Name(), Dir: t.TempDir(), DBID: root.DBID(), MinFreeBytes: 1, BallastBytes: -1, Proxy: &po, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	f := &viewFetcher{src: root}
	relay.SetFetcher(f)
	rootAddr := startServer(t, root, NewProcessID(), nil)
	_, stop := startReplica(t, relay, NewProcessID(), []string{rootAddr}, nil)
	defer stop()
	i2 := writeOps(t, root, setOp("pad", "1"))
	waitCaughtUp(t, relay, root)
	addr := startServer(t, relay, NewProcessID(), func(c *ServerConfig) { c.Relay = func(string) bool { return true } })
	c := fetchSession(t, addr, relay)

	// a and b are remote at the relay: fetched, checked, answered.
	v := roundTrip(t, c, &Fetch{ID: 1, AsOf: i2, Items: []FetchKey{{Key: []byte("a"), Index: i1}, {Key: []byte("b"), Index: i1},
		{Key: []byte("a"), Index: i2 + 5}, {Key: []byte("a"), Index: i2}, {Key: []byte("pad")}}})
	checkResults(t, v, []FetchResult{{Status: FetchOK, Index: i1, Value: []byte("one")}, {Status: FetchOK, Index: i1, Value: []byte("x")},
		{Status: FetchBehind}, {Status: FetchMismatch}, {Status: FetchOK, Index: i2, Value: []byte("1")}})
	if v.Applied != i2 {
		t.Fatalf("applied %d, want %d", v.Applied, i2)
	}
	// a changes, b goes: the versions asked are gone from the relay (it
	// keeps no history), as is "the version current at" an earlier index.
	i3 := writeOps(t, root, setOp("a", "two"), delOp("b"))
	waitCaughtUp(t, relay, root)
	v = roundTrip(t, c, &Fetch{ID: 2, AsOf: i2, Items: []FetchKey{{Key: []byte("a"), Index: i1}, {Key: []byte("b"), Index: i1},
		{Key: []byte("a")}, {Key: []byte("a"), Index: i3}}})
	checkResults(t, v, []FetchResult{{Status: FetchGone}, {Status: FetchGone}, {Status: FetchGone}, {Status: FetchOK, Index: i3, Value: []byte("two")}})
	v = roundTrip(t, c, &Fetch{ID: 3, AsOf: 0, Items: []FetchKey{{Key: []byte("b")}, {Key: []byte("a")}}})
	checkResults(t, v, []FetchResult{{Status: FetchAbsent}, {Status: FetchOK, Index: i3, Value: []byte("two")}})

	// The relay cannot reach its replicas: error, for every key. c left
	// the window with pad's entry; its value goes with the keeper's next
	// sweep, unless both entries came in one batch and it was never kept.
	writeOps(t, root, setOp("c", "new"))
	writeOps(t, root, setOp("pad", "2"))
	waitRemote(t, relay, root, 1)
	f.fail.Store(true)
	errsBefore := counter(t, metricsOf(t).fetchKeys.WithLabelValues(FetchError.String()))
	v = roundTrip(t, c, &Fetch{ID: 4, AsOf: 0, Items: []FetchKey{{Key: []byte("c")}, {Key: []byte("pad")}}})
	checkResults(t, v, []FetchResult{{Status: FetchError}, {Status: FetchError}})
	if n := counter(t, metricsOf(t).fetchKeys.WithLabelValues(FetchError.String())) - errsBefore; n != 2 {
		t.Fatalf("%v keys counted as errors, want 2", n)
	}
}
