package repl

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/store"
)

// BenchmarkPrefetchStream: values of 1 KiB published by a relay, in
// answers of 100 keys, through one prefetch stream on loopback into a
// proxy's transient tier. Reports values received per second and the
// share dropped (a subscriber's queue full).
func BenchmarkPrefetchStream(b *testing.B) {
	dir := b.TempDir()
	relaySt, err := store.Open(store.Options{Name: "bench", Dir: dir + "/relay", DBID: store.DBID{7}, MinFreeBytes: 1, BallastBytes: -1,
		Proxy: &store.ProxyOptions{Window: 1, CacheBytes: -1}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer relaySt.Close()
	px, err := store.Open(store.Options{Name: "bench", Dir: dir + "/proxy", DBID: store.DBID{7}, MinFreeBytes: 1, BallastBytes: -1,
		Proxy: &store.ProxyOptions{Window: 1, CacheBytes: -1, TransientBytes: 64 << 20}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer px.Close()
	ms := NewMetrics() // the relay's
	srv, err := NewServer(ServerConfig{ProcessID: NewProcessID(), Relay: func(string) bool { return true }, Metrics: ms},
		func(db string) (*store.Store, bool) { return relaySt, db == "bench" }, quiet)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	p := StartPrefetch(PrefetchConfig{Database: "bench", DBID: store.DBID{7}, ProcessID: NewProcessID(), Relays: []string{ln.Addr().String()}}, px, quiet)
	defer p.Close()
	deadline := time.Now().Add(60 * time.Second)
	for srv.prefetch.n.Load() == 0 {
		if time.Now().After(deadline) {
			b.Fatal("no subscription in 60s")
		}
		time.Sleep(time.Millisecond)
	}
	const batch = 100
	value := make([]byte, 1024)
	m := &Fetch{Items: make([]FetchKey, batch)}
	ans := &Values{Results: make([]FetchResult, batch)}
	asker := NewProcessID()
	b.SetBytes(int64(len(value)))
	b.ResetTimer()
	published := 0
	for published < b.N {
		n := min(batch, b.N-published)
		for i := 0; i < n; i++ {
			m.Items[i] = FetchKey{Key: []byte(fmt.Sprintf("key/%09d", published+i)), Index: uint64(published + i + 1)}
			ans.Results[i] = FetchResult{Status: FetchOK, Index: uint64(published + i + 1), Value: value}
		}
		srv.prefetch.publish("bench", asker, &Fetch{Items: m.Items[:n]}, &Values{Results: ans.Results[:n]})
		published += n
	}
	dropped := func() int64 {
		return int64(testutil.ToFloat64(ms.prefetchPublished.WithLabelValues("dropped")))
	}
	for p.Stats().Received+dropped() < int64(published) {
		if time.Now().After(deadline.Add(time.Minute)) {
			b.Fatalf("received %d of %d in time", p.Stats().Received, published)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(p.Stats().Received)/b.Elapsed().Seconds(), "received/s")
	b.ReportMetric(float64(dropped())/float64(published), "dropped/op")
}
