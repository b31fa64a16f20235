package clusterauth

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two Auths of one process, listening on ports of the same name, count
// in their own Metrics: a handshake and an open connection of one are not
// seen by the other, and the connection leaves the gauge at zero once
// closed.
func TestAuthsCountApart(t *testing.T) {
	t.Parallel()
	ma, mb := NewMetrics(), NewMetrics()
	a := New(Options{Key: testKey(t, 1), Metrics: ma})
	echoServer(t, New(Options{Key: testKey(t, 1), Metrics: mb}), "repl", 0)
	ln, peers, errs := echoServer(t, a, "repl", 0)
	c, err := a.Dialer("")(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitPeer(t, peers, errs); err != nil {
		t.Fatal(err)
	}
	waitCount(t, ln, resultOK, 1)
	if v := testutil.ToFloat64(ma.conns.WithLabelValues("repl")); v != 1 {
		t.Errorf("a: connections %v, want 1", v)
	}
	if n := testutil.CollectAndCount(mb); n != 1 {
		t.Errorf("b exports %d series, want only its insecure gauge", n)
	}
	c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(ma.conns.WithLabelValues("repl")) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a: connections %v 30s after the close, want 0", testutil.ToFloat64(ma.conns.WithLabelValues("repl")))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The process-level gauges and counters a server sets through its
// Metrics: insecure, and reloads by result.
func TestMetricsInsecureAndReloads(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	m.SetInsecure(true)
	if v := testutil.ToFloat64(m.insecure); v != 1 {
		t.Fatalf("insecure %v after SetInsecure(true)", v)
	}
	m.SetInsecure(false)
	if v := testutil.ToFloat64(m.insecure); v != 0 {
		t.Fatalf("insecure %v after SetInsecure(false)", v)
	}
	m.CountReload(true)
	m.CountReload(false)
	m.CountReload(false)
	if v := testutil.ToFloat64(m.reloads.WithLabelValues("ok")); v != 1 {
		t.Errorf("ok reloads %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.ReloadErrors()); v != 2 {
		t.Errorf("failed reloads %v, want 2", v)
	}
}
