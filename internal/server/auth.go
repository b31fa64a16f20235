package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/quicksilver-kv/qs/internal/config"
)

// replTLS holds the TLS configurations of replication, built once from
// the certificate files.
type replTLS struct {
	server *tls.Config // nil: the listener speaks plain TCP
	client *tls.Config // nil: replicas dial plain TCP
}

func loadReplTLS(c config.TLS) (replTLS, error) {
	if !c.Enabled() {
		return replTLS{}, nil
	}
	var r replTLS
	var certs []tls.Certificate
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return r, fmt.Errorf("repl_tls: %w", err)
		}
		certs = []tls.Certificate{cert}
	}
	var pool *x509.CertPool
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return r, fmt.Errorf("repl_tls: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return r, fmt.Errorf("repl_tls: no certificate found in %s", c.CA)
		}
	}
	if len(certs) > 0 {
		r.server = &tls.Config{Certificates: certs, MinVersion: tls.VersionTLS13}
		if pool != nil {
			r.server.ClientCAs = pool
			r.server.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	r.client = &tls.Config{Certificates: certs, RootCAs: pool, MinVersion: tls.VersionTLS13}
	return r, nil
}

// listener wraps ln in TLS when configured.
func (r replTLS) listener(ln net.Listener) net.Listener {
	if r.server == nil {
		return ln
	}
	return tls.NewListener(ln, r.server)
}

// dial is the replicas' dialer: TLS with the source's host as server name
// when configured, plain TCP otherwise (nil lets repl use its default).
func (r replTLS) dial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if r.client == nil {
		return nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg := r.client.Clone()
		cfg.ServerName = host
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			var cv *tls.CertificateVerificationError
			if errors.As(err, &cv) {
				return nil, fmt.Errorf("tls: source certificate not trusted: %w", err)
			}
			return nil, err
		}
		return c, nil
	}
}
