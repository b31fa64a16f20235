package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestReplicationMutualTLS runs a root whose replication listener requires
// client certificates signed by the test CA: a replica with such a
// certificate replicates; a replica without one, or with one from another
// CA, gets nothing.
func TestReplicationMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "qs test CA")
	other := newCA(t, "some other CA")
	ca.issue(t, dir, "root")
	ca.issue(t, dir, "replica")
	other.issue(t, dir, "stranger")
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.der)

	tlsConf := func(name string) string {
		p := filepath.Join(dir, name+".toml")
		body := fmt.Sprintf("[repl_tls]\ncert = %q\nkey = %q\nca = %q\n",
			filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"), filepath.Join(dir, "ca.pem"))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := startQS(t, t.TempDir(), "--config", tlsConf("root"))
	w, err := root.client(t).Put(context.Background(), "secret", []byte("s3"), nil)
	if err != nil {
		t.Fatal(err)
	}
	good := startQS(t, t.TempDir(), "--config", tlsConf("replica"), "--upstream", root.Addr["repl"])
	v, err := good.client(t).Get(context.Background(), "secret", client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second})
	if err != nil || string(v.Value) != "s3" {
		t.Fatalf("replica with a valid certificate: %+v %v", v, err)
	}

	// A new replica that cannot complete the TLS handshake cannot even
	// learn the database id: it refuses to start, saying why.
	for _, name := range []string{"stranger", ""} {
		args := []string{"serve", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--upstream", root.Addr["repl"]}
		if name != "" {
			args = append(args, "--config", tlsConf(name))
		}
		out, code := runQSTimeout(t, 40*time.Second, args...)
		if code != 1 || !strings.Contains(out, "learn database id") {
			t.Fatalf("replica %q against a mutual-TLS root: exit %d (want 1, refused at start):\n%s", name, code, out)
		}
		t.Logf("replica %q refused as expected: %s", name, lastLine(out))
	}
	good.stop()
	root.stop()
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, der: der}
}

// issue writes name.pem and name-key.pem: a certificate for 127.0.0.1
// usable as server and as client, speaking for the Raft members raftIDs.
func (ca *testCA) issue(t *testing.T, dir, name string, raftIDs ...uint64) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, id := range raftIDs {
		tmpl.URIs = append(tmpl.URIs, &url.URL{Scheme: "qs", Opaque: fmt.Sprintf("raft-node/%d", id)})
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	kder, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kder)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
