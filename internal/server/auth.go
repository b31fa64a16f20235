package server

import (
	"context"
	"net"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
)

// maxRaftConns caps the connections open on one Raft listener: each
// member keeps one to every other, so a few hundred is room for large
// clusters and reconnects.
const maxRaftConns = 256

// insecureWarnEvery is how often a node listening beyond loopback without
// authentication says so.
const insecureWarnEvery = time.Minute

// loadAuth builds the authentication of the internal ports from the
// cluster key file and repl_tls, counting in m (nil: its own), and
// refuses listen addresses beyond loopback without it unless insecure is
// set. It returns those addresses (to warn about) when insecure lets them
// listen.
func loadAuth(c *config.Config, m *clusterauth.Metrics) (*clusterauth.Auth, []string, error) {
	o, err := authOptions(c)
	if err != nil {
		return nil, nil, err
	}
	o.Metrics = m
	a := clusterauth.New(o)
	open, err := a.CheckListen(c.InternalListens(), c.Insecure)
	if err != nil {
		return nil, nil, err
	}
	return a, open, nil
}

// authOptions reads the cluster key file (every key of it: the first is
// the one this node proves itself with) and repl_tls.
func authOptions(c *config.Config) (clusterauth.Options, error) {
	var o clusterauth.Options
	if c.ClusterKey != "" {
		ks, err := clusterauth.LoadKeys(c.ClusterKey)
		if err != nil {
			return o, err
		}
		o.Key, o.MoreKeys = ks[0], ks[1:]
	}
	var err error
	o.ServerTLS, o.ClientTLS, err = clusterauth.LoadTLS(c.ReplTLS.Cert, c.ReplTLS.Key, c.ReplTLS.CA)
	return o, err
}

// replDial is the dialer of this node's replicas, proxies and snapshot
// fetches (nil: repl's plain TCP default).
func (s *Server) replDial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if s.auth.Mode() == "none" {
		return nil
	}
	return s.auth.Dialer("")
}

// warnInsecure logs, at start and every minute until the server stops,
// that internal ports listen beyond loopback without authentication.
func (s *Server) warnInsecure() {
	if len(s.insecure) == 0 {
		return
	}
	s.meters.auth.SetInsecure(true)
	warn := func() {
		s.log.Warn("INSECURE: replication and Raft listen beyond loopback without authentication (--insecure): anyone who reaches them can read every value and, on Raft, write; give --cluster-key or mutual TLS",
			"addrs", s.insecure)
	}
	warn()
	s.goFunc(func() {
		t := time.NewTicker(insecureWarnEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				warn()
			case <-s.quit:
				s.meters.auth.SetInsecure(false)
				return
			}
		}
	})
}
