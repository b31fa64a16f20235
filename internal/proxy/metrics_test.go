package proxy

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/metrics/metricstest"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// TestComponentsCountInTheMetricsGiven: two pools, L2 tiers and shard
// warmers of the same database, each given its own Metrics, count apart:
// what one counts is in its Metrics only.
func TestComponentsCountInTheMetricsGiven(t *testing.T) {
	t.Parallel()
	const db = "apart"
	member := fakeMember(t, func(net.Conn) {})
	a, b := NewMetrics(), NewMetrics()
	pools := map[*Metrics]*Pool{}
	for _, m := range []*Metrics{a, b} {
		p, err := New(Config{Database: db, Replicas: []string{member}, Metrics: m}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[m] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	huge := []store.FetchItem{{Key: []byte("huge"), Index: 7, Len: repl.MaxFetchValueBytes + 1}}
	if err := pools[a].Fetch(ctx, 9, huge); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("fetch of a value too large: %v, want store.ErrTooLarge", err)
	}
	if n := counter(t, a.fetches.WithLabelValues(db, "too_large")); n != 1 {
		t.Fatalf("the pool that refused counted too_large %v times, want 1", n)
	}
	if n := valueIn(t, b, "qs_proxy_fetches_total", map[string]string{"db": db, "result": "too_large"}); n != 0 {
		t.Fatalf("the other pool's Metrics counted too_large %v times", n)
	}
	// Each pool's gauges are in its own Metrics.
	for _, m := range []*Metrics{a, b} {
		if n := valueIn(t, m, "qs_proxy_members", map[string]string{"db": db, "tier": "preferred"}); n != 1 {
			t.Fatalf("members{preferred} = %v in a pool's Metrics, want 1 (its own member only)", n)
		}
	}

	shards, err := cache.NewShardMap(2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewL2(L2Config{Database: db, Peers: []string{member}, Shards: shards, NodeName: "n1", Next: pools[a], Metrics: a}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	if !l2PeerExported(t, a, db, member) || l2PeerExported(t, b, db, member) {
		t.Fatal("an L2 peer's series is not in the Metrics its tier was given, or is in another")
	}

	s := &fakeWarmStore{keys: 10, room: 100, held: map[string][]byte{}}
	w, err := StartShardWarmer(WarmConfig{Database: db, Store: s, Next: &fakeFetcher{value: "value"}, Rate: 1_000_000, Interval: time.Hour, Metrics: b}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a warm-up pass", func() bool {
		return valueIn(t, b, "qs_proxy_shard_warm_total", map[string]string{"db": db, "result": "done"}) == 1
	})
	w.Close()
	if n := valueIn(t, b, "qs_proxy_shard_warm_total", map[string]string{"db": db, "result": "held"}); n != 10 {
		t.Fatalf("the warmer's Metrics counted %v values held, want 10", n)
	}
	if fams := metricstest.Families(t, a); fams["qs_proxy_shard_warm_total"] != nil {
		t.Fatal("a warmer counted in Metrics it was not given")
	}
}

// valueIn sums the series of metric name collected by c whose labels
// include want.
func valueIn(t *testing.T, c prometheus.Collector, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, m := range matching(metricstest.Families(t, c)[name], want) {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// seriesOf counts the series of metric name collected by c whose labels
// include want.
func seriesOf(t *testing.T, c prometheus.Collector, name string, want map[string]string) int {
	t.Helper()
	return len(matching(metricstest.Families(t, c)[name], want))
}

// l2PeerExported reports whether c exports the l2_peer_up series of peer
// for db.
func l2PeerExported(t *testing.T, c prometheus.Collector, db, peer string) bool {
	t.Helper()
	return seriesOf(t, c, "qs_proxy_l2_peer_up", map[string]string{"db": db, "peer": peer}) > 0
}

// matching returns the series of mf (nil: none) whose labels include
// want.
func matching(mf *dto.MetricFamily, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
next:
	for _, m := range mf.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == k && l.GetValue() == v
			}
			if !found {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}
