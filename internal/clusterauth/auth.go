package clusterauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures an Auth. The zero value authenticates nothing.
type Options struct {
	// Key is the cluster key; zero: none.
	Key Key
	// MoreKeys are keys accepted from peers besides Key, during a
	// rotation (a key file of several keys: the first is Key).
	MoreKeys []Key
	// ServerTLS and ClientTLS are the TLS configurations of listeners and
	// dialers; nil: no TLS. Mutual TLS needs a ServerTLS that requires and
	// verifies client certificates (LoadTLS makes both).
	ServerTLS, ClientTLS *tls.Config
	// HandshakeTimeout bounds a connection's authentication. Default 10s.
	HandshakeTimeout time.Duration
	// Metrics count the connections of the Auth's listeners; nil: a
	// private NewMetrics, registered nowhere. Reload keeps those of New.
	Metrics *Metrics
}

// Auth authenticates the internal connections of one process. Its keys
// and certificates can be replaced while it runs (Reload): connections
// authenticate with those in force when they start.
type Auth struct {
	cur     atomic.Pointer[authState]
	timeout time.Duration
	m       *Metrics
}

// authState is what one Reload puts in force.
type authState struct {
	keys      [][]byte // handshake keys, the one this node proves with first; nil: none
	serverTLS *tls.Config
	clientTLS *tls.Config
	gossip    []byte
}

func stateOf(o Options) *authState {
	st := &authState{serverTLS: o.ServerTLS, clientTLS: o.ClientTLS}
	if !o.Key.IsZero() {
		st.keys = append(st.keys, o.Key.handshakeKey())
		st.gossip = o.Key.GossipKey()
		for _, k := range o.MoreKeys {
			if !k.IsZero() {
				st.keys = append(st.keys, k.handshakeKey())
			}
		}
	}
	return st
}

// New returns the Auth of o.
func New(o Options) *Auth {
	a := &Auth{timeout: o.HandshakeTimeout, m: o.Metrics}
	if a.m == nil {
		a.m = NewMetrics()
	}
	a.cur.Store(stateOf(o))
	if a.timeout <= 0 {
		a.timeout = 10 * time.Second
	}
	return a
}

// ErrReloadMode: a reload would change how the internal ports
// authenticate (add or remove the cluster key, TLS or mutual TLS), which
// the peers of a running node cannot follow; it needs a restart.
var ErrReloadMode = errors.New("qs: reloaded keys and certificates change the authentication mode; restart to change it")

// Reload puts o's keys and certificates in force for the connections
// that start from now on; those open keep theirs. It refuses a change of
// Mode (ErrReloadMode), keeping the keys in force.
func (a *Auth) Reload(o Options) error {
	st := stateOf(o)
	if got, want := st.mode(), a.Mode(); got != want {
		return fmt.Errorf("%w: %s, in force %s", ErrReloadMode, got, want)
	}
	a.cur.Store(st)
	return nil
}

func (st *authState) mtls() bool {
	return st.serverTLS != nil && st.serverTLS.ClientAuth == tls.RequireAndVerifyClientCert
}

func (st *authState) mode() string {
	switch {
	case st.mtls() && st.keys != nil:
		return "mtls+cluster-key"
	case st.mtls():
		return "mtls"
	case st.keys != nil:
		return "cluster-key"
	case st.serverTLS != nil:
		return "tls"
	}
	return "none"
}

// Authenticated reports whether every connection accepted is
// authenticated: by the cluster key, or by mutual TLS.
func (a *Auth) Authenticated() bool {
	st := a.cur.Load()
	return st.keys != nil || st.mtls()
}

// Mode names the authentication: "mtls", "cluster-key", "mtls+cluster-key",
// "tls" (server certificate only: clients are not authenticated) or "none".
func (a *Auth) Mode() string { return a.cur.Load().mode() }

// GossipKey is the gossip encryption key derived from the cluster key
// this node proves itself with, or nil without one.
func (a *Auth) GossipKey() []byte { return a.cur.Load().gossip }

// Peer is who a connection authenticated as.
type Peer struct {
	// Authenticated: the peer proved it holds the cluster key or a
	// certificate of the cluster's CA. False on ports without
	// authentication, where nothing below is known.
	Authenticated bool
	// Claims are what the peer may speak for: the "qs:" URI SANs of its
	// certificate (without the scheme), or the claim of its keyed
	// handshake.
	Claims []string
}

// Has reports whether the peer claims c.
func (p Peer) Has(c string) bool {
	for _, x := range p.Claims {
		if x == c {
			return true
		}
	}
	return false
}

// RaftClaim is the claim of Raft member id.
func RaftClaim(id uint64) string { return fmt.Sprintf("raft-node/%d", id) }

// Dialer returns a dial function that authenticates each connection,
// claiming claim in a keyed handshake ("" claims nothing).
func (a *Auth) Dialer(claim string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		st := a.cur.Load()
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(a.timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		c.SetDeadline(deadline)
		if st.clientTLS != nil {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				c.Close()
				return nil, err
			}
			cfg := st.clientTLS.Clone()
			cfg.ServerName = host
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				var cv *tls.CertificateVerificationError
				if errors.As(err, &cv) {
					return nil, fmt.Errorf("tls: server certificate not trusted: %w", err)
				}
				return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
			}
			c = tc
		}
		if st.keys != nil {
			if err := clientHandshake(c, st.keys, claim); err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: %w", addr, err)
			}
		}
		c.SetDeadline(time.Time{})
		return c, nil
	}
}

// Listener wraps ln: at most maxConns connections (0: no cap) are open at
// once, more are closed at accept; each accepted connection authenticates
// on its first Read or Write, or on PeerOf, within the handshake timeout.
// port names the listener in metrics ("raft", "repl").
func (a *Auth) Listener(ln net.Listener, port string, maxConns int) net.Listener {
	return &listener{Listener: ln, a: a, port: port, max: int64(maxConns)}
}

type listener struct {
	net.Listener
	a    *Auth
	port string
	max  int64
	open atomic.Int64
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			l.a.m.handshakes.WithLabelValues(l.port, resultConnLimit).Inc()
			c.Close()
			continue
		}
		l.a.m.conns.WithLabelValues(l.port).Inc()
		return &Conn{Conn: c, raw: c, l: l}, nil
	}
}

// Open is the number of connections of the listener open now.
func (l *listener) Open() int { return int(l.open.Load()) }

// Conn is an accepted connection; it authenticates before its first byte
// of protocol is read or written.
type Conn struct {
	net.Conn // after the handshake: the TLS connection when TLS is on
	raw      net.Conn
	l        *listener

	once    sync.Once
	peer    Peer
	err     error
	closed  atomic.Bool
	dlMu    sync.Mutex
	rdl     time.Time // deadlines set by the protocol before the handshake
	wdl     time.Time
	authing atomic.Bool
}

// Handshake authenticates the connection (once) and returns who the peer
// is. On failure the connection is closed.
func (c *Conn) Handshake() (Peer, error) {
	c.once.Do(c.handshake)
	return c.peer, c.err
}

func (c *Conn) handshake() {
	a := c.l.a
	st := a.cur.Load()
	c.authing.Store(true)
	c.raw.SetDeadline(time.Now().Add(a.timeout))
	result := resultOK
	defer func() {
		c.authing.Store(false)
		if c.err != nil {
			c.raw.Close()
		} else {
			c.dlMu.Lock()
			c.Conn.SetReadDeadline(c.rdl)
			c.Conn.SetWriteDeadline(c.wdl)
			c.dlMu.Unlock()
		}
		a.m.handshakes.WithLabelValues(c.l.port, result).Inc()
	}()
	fail := func(r string, err error) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			r = resultTimeout
		}
		result, c.err = r, fmt.Errorf("authenticate %s: %w", c.raw.RemoteAddr(), err)
	}
	peer := Peer{Authenticated: st.keys != nil || st.mtls()}
	if st.serverTLS != nil {
		tc := tls.Server(c.raw, st.serverTLS)
		if err := tc.Handshake(); err != nil {
			fail(resultBadCert, err)
			return
		}
		c.Conn = tc
		if st := tc.ConnectionState(); len(st.PeerCertificates) > 0 {
			for _, u := range st.PeerCertificates[0].URIs {
				if u.Scheme == "qs" && u.Opaque != "" {
					peer.Claims = append(peer.Claims, u.Opaque)
				}
			}
		}
	}
	if st.keys != nil {
		claim, err := serverHandshake(c.Conn, st.keys)
		switch {
		case errors.Is(err, ErrBadKey):
			fail(resultBadKey, err)
			return
		case errors.Is(err, ErrNotKeyed):
			fail(resultNotKeyed, err)
			return
		case err != nil:
			fail(resultIO, err)
			return
		}
		if claim != "" {
			peer.Claims = append(peer.Claims, claim)
		}
	}
	c.peer = peer
}

func (c *Conn) Read(b []byte) (int, error) {
	if _, err := c.Handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *Conn) Write(b []byte) (int, error) {
	if _, err := c.Handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Close closes the connection (once).
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.l.open.Add(-1)
	c.l.a.m.conns.WithLabelValues(c.l.port).Dec()
	return c.raw.Close()
}

// SetDeadline, SetReadDeadline and SetWriteDeadline set the protocol's
// deadlines; during the handshake the handshake timeout applies, and the
// protocol's deadlines take over after it.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.rdl = t
	if c.authing.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.wdl = t
	if c.authing.Load() {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

// PeerOf authenticates c if it came from an Auth listener and returns its
// peer; a connection from any other listener is an unauthenticated peer.
func PeerOf(c net.Conn) (Peer, error) {
	if ac, ok := c.(*Conn); ok {
		return ac.Handshake()
	}
	return Peer{}, nil
}

// IsLoopback reports whether a listen address binds only loopback
// ("127.0.0.1:7390", "[::1]:0", "localhost:7390"). An empty host or an
// unspecified address (":7390", "0.0.0.0:7390") binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ErrInsecure: a port listens beyond loopback without authentication.
var ErrInsecure = errors.New("qs: internal ports listen beyond loopback without authentication")

// CheckListen refuses internal listen addresses beyond loopback unless a
// is authenticated or insecure is set. It returns the addresses that
// listen beyond loopback unauthenticated (to warn about), or ErrInsecure.
func (a *Auth) CheckListen(addrs []string, insecure bool) ([]string, error) {
	if a.Authenticated() {
		return nil, nil
	}
	var open []string
	for _, ad := range addrs {
		if ad != "" && !IsLoopback(ad) {
			open = append(open, ad)
		}
	}
	if len(open) > 0 && !insecure {
		return open, fmt.Errorf("%w: %v; give a cluster key (--cluster-key FILE, made by qs cert key) or mutual TLS (repl_tls cert, key and ca, made by qs cert), or --insecure to run unauthenticated anyway", ErrInsecure, open)
	}
	return open, nil
}

// LoadTLS builds the TLS configurations of internal connections from PEM
// files: with cert and key, listeners present them (and dialers present
// them as client certificates); with ca, peers are verified against it and
// listeners require client certificates it signed (mutual TLS). All empty:
// nil, nil.
func LoadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if certFile == "" && keyFile == "" && caFile == "" {
		return nil, nil, nil
	}
	var certs []tls.Certificate
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("repl_tls: %w", err)
		}
		certs = []tls.Certificate{cert}
	}
	var pool *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, nil, fmt.Errorf("repl_tls: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("repl_tls: no certificate found in %s", caFile)
		}
	}
	if len(certs) > 0 {
		server = &tls.Config{Certificates: certs, MinVersion: tls.VersionTLS13}
		if pool != nil {
			server.ClientCAs = pool
			server.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	client = &tls.Config{Certificates: certs, RootCAs: pool, MinVersion: tls.VersionTLS13}
	return server, client, nil
}
