package clusterauth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCerts makes a CA and a node certificate in dir and returns the
// files' paths.
type certFiles struct{ cert, key, ca string }

func writeCerts(t *testing.T, dir, node string, raftIDs ...uint64) certFiles {
	t.Helper()
	caPath, caKeyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		var caKey []byte
		caPEM, caKey, err = NewCA("test cluster", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(caPath, caPEM, 0o600)
		os.WriteFile(caKeyPath, caKey, 0o600)
	}
	caKey, _ := os.ReadFile(caKeyPath)
	c, k, err := NewNodeCert(caPEM, caKey, CertRequest{Name: node, Hosts: []string{"127.0.0.1", "localhost"}, RaftIDs: raftIDs, Valid: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := certFiles{filepath.Join(dir, node+".pem"), filepath.Join(dir, node+".key"), caPath}
	os.WriteFile(f.cert, c, 0o600)
	os.WriteFile(f.key, k, 0o600)
	return f
}

func tlsAuth(t *testing.T, f certFiles) *Auth {
	t.Helper()
	s, c, err := LoadTLS(f.cert, f.key, f.ca)
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{ServerTLS: s, ClientTLS: c})
}

func TestMutualTLSCarriesRaftClaims(t *testing.T) {
	dir := t.TempDir()
	srv := tlsAuth(t, writeCerts(t, dir, "n1", 1))
	if !srv.Authenticated() || srv.Mode() != "mtls" {
		t.Fatalf("mode %s", srv.Mode())
	}
	ln, peers, errs := echoServer(t, srv, "t-mtls-ok", 0)
	cli := tlsAuth(t, writeCerts(t, dir, "n2", 2))
	c, err := cli.Dialer("")(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c)
	p, err := waitPeer(t, peers, errs)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Authenticated || !p.Has(RaftClaim(2)) || p.Has(RaftClaim(1)) {
		t.Fatalf("peer %+v", p)
	}
}

func TestMutualTLSRefusesStrangers(t *testing.T) {
	dir := t.TempDir()
	ln, _, errs := echoServer(t, tlsAuth(t, writeCerts(t, dir, "n1", 1)), "t-mtls-bad", 0)

	// A certificate of another CA.
	other := t.TempDir()
	x := writeCerts(t, other, "x")
	ca := writeCerts(t, dir, "unused").ca
	if _, err := tlsAuth(t, certFiles{x.cert, x.key, ca}).Dialer("")(context.Background(), "tcp", ln.Addr().String()); err == nil {
		// TLS 1.3: the client may finish before the server refuses; the
		// server's error is the proof.
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("server accepted a certificate of another CA: %v", err)
		}
	}
	waitCount(t, ln, resultBadCert, 1)

	// No certificate at all, trusting the server's CA.
	_, c, err := LoadTLS("", "", ca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := New(Options{ClientTLS: c}).Dialer("")(context.Background(), "tcp", ln.Addr().String())
	if err == nil {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatal("server served a client without a certificate")
		}
		conn.Close()
	}
	waitCount(t, ln, resultBadCert, 2)
}

func TestServerCertificateOnlyIsNotAuthenticated(t *testing.T) {
	f := writeCerts(t, t.TempDir(), "n1")
	a := tlsAuth(t, certFiles{f.cert, f.key, ""})
	if a.Authenticated() || a.Mode() != "tls" {
		t.Fatalf("TLS without a CA: authenticated=%v mode=%s", a.Authenticated(), a.Mode())
	}
}

func TestNodeCertRefusesBadInput(t *testing.T) {
	caPEM, caKey, err := NewCA("c", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewNodeCert(caPEM, caKey, CertRequest{Name: "n", RaftIDs: []uint64{0}, Valid: time.Hour}); err == nil {
		t.Fatal("raft id 0 accepted")
	}
	if _, _, err := NewNodeCert(caPEM, caKey, CertRequest{Valid: time.Hour}); err == nil {
		t.Fatal("nameless certificate accepted")
	}
	node, nodeKey, err := NewNodeCert(caPEM, caKey, CertRequest{Name: "n", Valid: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewNodeCert(node, nodeKey, CertRequest{Name: "m", Valid: time.Hour}); err == nil {
		t.Fatal("a node certificate signed another")
	}
	if _, _, err := NewNodeCert([]byte("junk"), caKey, CertRequest{Name: "m", Valid: time.Hour}); err == nil {
		t.Fatal("junk CA accepted")
	}
}
