package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/quicksilver-kv/qs/client"
)

// dnsServer answers queries from the records a qs node (a leaf) holds
// under prefix.
type dnsServer struct {
	qs     *client.Client
	prefix string
	log    *slog.Logger
	srv    *dns.Server
}

// startDNS serves DNS over UDP on addr and returns the address it listens on.
func startDNS(addr string, qs *client.Client, prefix string, log *slog.Logger) (*dnsServer, string, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, "", err
	}
	s := &dnsServer{qs: qs, prefix: prefix, log: log}
	s.srv = &dns.Server{PacketConn: pc, Handler: s}
	started := make(chan struct{})
	s.srv.NotifyStartedFunc = func() { close(started) }
	go s.srv.ActivateAndServe()
	<-started
	return s, pc.LocalAddr().String(), nil
}

func (s *dnsServer) Close() { s.srv.Shutdown() }

// ServeDNS answers one query.
func (s *dnsServer) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	if len(q.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	name := strings.ToLower(q.Question[0].Name)
	v, err := s.qs.Get(ctx, s.prefix+name, client.ReadOptions{})
	var value []byte
	switch {
	case err == nil:
		value = v.Value
	case client.IsNotFound(err):
	default:
		s.log.Warn("read from qs", "name", name, "err", err)
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		w.WriteMsg(m)
		return
	}
	m, err := Answer(q, value)
	if err != nil {
		s.log.Warn("bad record", "name", name, "err", err)
	}
	w.WriteMsg(m)
}
