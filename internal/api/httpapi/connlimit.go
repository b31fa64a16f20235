package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
)

// ConnReserve is how many connections beyond ConnLimit.Max the listener
// should accept, so that health checks and metrics scrapes get through
// while readers hold every other connection.
const ConnReserve = 64

// ConnLimit keeps connections for /healthz and /metrics: while more than
// Max HTTP connections are open, every other request is answered 503
// unavailable and its connection closed. The server must accept Max +
// ConnReserve connections and report their states to ConnState.
type ConnLimit struct {
	Max int
	// Metrics counts the refusals. Nil: a private NewMetrics.
	Metrics *Metrics
	open    atomic.Int64
}

// ConnState counts open connections (http.Server.ConnState).
func (l *ConnLimit) ConnState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		l.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		l.open.Add(-1)
	}
}

// Open is the number of connections open now.
func (l *ConnLimit) Open() int { return int(l.open.Load()) }

// Wrap refuses requests other than health checks and metrics scrapes
// while the connections over Max are in use.
func (l *ConnLimit) Wrap(next http.Handler) http.Handler {
	m := l.Metrics
	if m == nil {
		m = NewMetrics()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := l.open.Load(); n > int64(l.Max) && r.URL.Path != "/healthz" && r.URL.Path != "/metrics" {
			m.connsRefused.Inc()
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			m.writeError(w, codeUnavailable, fmt.Errorf("qs: %d HTTP connections open, over max_http_conns %d: the rest are kept for /healthz and /metrics", n, l.Max), nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}
