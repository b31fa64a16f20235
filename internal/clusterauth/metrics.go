package clusterauth

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

const subsystem = "clusterauth"

// Handshake results, the values of the "result" label.
const (
	resultOK        = "ok"
	resultBadKey    = "bad_key"    // the peer's MAC did not verify
	resultNotKeyed  = "not_keyed"  // the peer did not start a keyed handshake
	resultBadCert   = "bad_cert"   // TLS handshake failed (no or untrusted certificate)
	resultTimeout   = "timeout"    // the handshake did not complete in time
	resultIO        = "io"         // the connection failed or closed during the handshake
	resultConnLimit = "conn_limit" // closed at accept: too many connections open
)

// Metrics are the collectors of the authenticators that share them: the
// server builds one per process and registers it (it is a
// prometheus.Collector); an Auth given none counts in a private one.
type Metrics struct {
	metrics.Group // every collector below, for the owner to register

	handshakes *prometheus.CounterVec
	conns      *prometheus.GaugeVec
	reloads    *prometheus.CounterVec
	insecure   prometheus.Gauge
}

// NewMetrics returns collectors at zero, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "handshakes_total",
			Help: "Connections accepted on the internal ports (Raft, replication), by port and authentication result: ok, bad_key, not_keyed, bad_cert, timeout, io, conn_limit."},
			[]string{"port", "result"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "connections",
			Help: "Connections open on the internal ports, authenticated or not yet, by port."},
			[]string{"port"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "reloads_total",
			Help: "Reloads of the cluster key, certificates and root public keys (SIGHUP), by result: ok, error (a file did not load: the keys in force stay)."},
			[]string{"result"}),
		insecure: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "insecure",
			Help: "1 while internal ports listen beyond loopback without authentication (--insecure)."}),
	}
	m.Group = metrics.Group{m.handshakes, m.conns, m.reloads, m.insecure}
	return m
}

// SetInsecure sets the insecure gauge.
func (m *Metrics) SetInsecure(on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.insecure.Set(v)
}

// CountReload counts a reload of the keys and certificates: ok, or not
// (the keys in force stay).
func (m *Metrics) CountReload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("ok").Inc()
		return
	}
	m.reloads.WithLabelValues("error").Inc()
}

// ReloadErrors is the counter of failed reloads (for tests of callers).
func (m *Metrics) ReloadErrors() prometheus.Counter { return m.reloads.WithLabelValues("error") }
