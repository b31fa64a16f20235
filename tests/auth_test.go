package tests

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// writeKey writes a cluster key file of 32 bytes of hex.
func writeKey(t *testing.T, b byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("%02x", b), 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterKeyTree: a root, a replica and a proxy sharing a cluster key
// replicate and fetch as without one; a replica with another key, or
// none, is refused (it cannot even learn the database id), and the root
// counts the refusals.
func TestClusterKeyTree(t *testing.T) {
	key := writeKey(t, 0x11)
	root := startQS(t, t.TempDir(), "--cluster-key", key)
	replica := startQS(t, t.TempDir(), "--cluster-key", key, "--upstream", root.Addr["repl"])
	px := startQS(t, t.TempDir(), "--cluster-key", key, "--upstream", root.Addr["repl"], "--role", "proxy",
		"--replicas", replica.Addr["repl"], "--cache-bytes", "1", "--window", "5")
	ctx := context.Background()
	first, err := root.client(t).Put(ctx, "old", []byte("fetched"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := range 20 { // push "old" out of the proxy's window
		r, err := root.client(t).Put(ctx, fmt.Sprint("k", i), []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Index
	}
	for _, p := range []*proc{replica, px} {
		v, err := p.client(t).Get(ctx, "old", client.ReadOptions{MinIndex: last, Wait: 30 * time.Second})
		if err != nil || string(v.Value) != "fetched" || v.Index != first.Index {
			t.Fatalf("%s: %+v %v", p.Dir, v, err)
		}
	}
	for _, args := range [][]string{{"--cluster-key", writeKey(t, 0x22)}, nil} {
		all := append([]string{"serve", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0",
			"--repl", "127.0.0.1:0", "--upstream", root.Addr["repl"]}, args...)
		out, code := runQSTimeout(t, 60*time.Second, all...)
		if code != 1 || !strings.Contains(out, "learn database id") {
			t.Fatalf("replica %v against a keyed root: exit %d (want 1):\n%s", args, code, out)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, root.Addr["http"], `qs_clusterauth_handshakes_total{port="repl",result="bad_key"}`) < 1 ||
		metricValue(t, root.Addr["http"], `qs_clusterauth_handshakes_total{port="repl",result="not_keyed"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("refused replicas not counted by result")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRaftClusterKey: a 3-member Raft root with a cluster key elects,
// replicates and answers a stranger with nothing.
func TestRaftClusterKey(t *testing.T) {
	c := newRaftCluster(t, 3, "--cluster-key", writeKey(t, 0x33))
	c.startAll()
	lead := c.leader(30 * time.Second)
	cl := c.client(c.httpAddrs(), 10)
	var acks []raftAck
	for i := range 20 {
		k := fmt.Sprint("k/", i)
		res, err := cl.Put(bg, k, []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, raftAck{key: k, value: "v", index: res.Index})
	}
	// A question hello: before authentication it would name the cluster.
	conn, err := net.Dial("tcp", lead.raft)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	payload := []byte("QSRT\x01" + strings.Repeat("\x00", 33))
	frame := append([]byte{1, 0, 0, 0, byte(len(payload))}, payload...)
	sum := crc32.Update(crc32.Checksum(frame[:1], crc32.MakeTable(crc32.Castagnoli)), crc32.MakeTable(crc32.Castagnoli), payload)
	conn.Write(binary.BigEndian.AppendUint32(frame, sum))
	if b, _ := io.ReadAll(conn); len(b) != 0 {
		t.Fatalf("a stranger got %q from the Raft port", b)
	}
	conn.Close()
	c.waitSameApplied(acks[len(acks)-1].index, 30*time.Second)
	checkRaftLog(t, c.checkSameStores(), acks, nil)
}

// TestRefusesInsecureListen: internal ports beyond loopback need a
// cluster key or mutual TLS, or --insecure (which warns).
func TestRefusesInsecureListen(t *testing.T) {
	out, code := runQSTimeout(t, 60*time.Second, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0",
		"--memcache", "127.0.0.1:0", "--repl", "0.0.0.0:0")
	if code != 1 || !strings.Contains(out, "without authentication") {
		t.Fatalf("repl on 0.0.0.0 without a key: exit %d (want 1):\n%s", code, out)
	}
	p := startQS(t, t.TempDir(), "--repl", "0.0.0.0:0", "--insecure", "--log-level", "warn")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.out.String(), "INSECURE") {
		if time.Now().After(deadline) {
			t.Fatalf("no insecure warning:\n%s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := metricValue(t, p.Addr["http"], `qs_clusterauth_insecure`); v != 1 {
		t.Fatalf("qs_clusterauth_insecure = %v", v)
	}
	p.stop()
	p = startQS(t, t.TempDir(), "--repl", "0.0.0.0:0", "--cluster-key", writeKey(t, 0x44))
	p.stop()
}

// TestCertMutualTLSTree: credentials made with qs cert secure a root, a
// replica and a proxy; a node with a certificate of another CA is refused
// and counted.
func TestCertMutualTLSTree(t *testing.T) {
	dir := t.TempDir()
	ca, other := filepath.Join(dir, "ca"), filepath.Join(dir, "other")
	for _, args := range [][]string{
		{"cert", "ca", "--out", ca},
		{"cert", "ca", "--out", other, "--name", "another CA"},
		{"cert", "node", "--ca", ca, "--name", "root", "--host", "127.0.0.1,localhost", "--out", dir},
		{"cert", "node", "--ca", ca, "--name", "replica", "--host", "127.0.0.1", "--out", dir},
		{"cert", "node", "--ca", ca, "--name", "proxy", "--host", "127.0.0.1", "--out", dir},
		{"cert", "node", "--ca", other, "--name", "stranger", "--host", "127.0.0.1", "--out", dir},
	} {
		if out, code := runQS(t, args...); code != 0 {
			t.Fatalf("qs %v: exit %d\n%s", args, code, out)
		}
	}
	if out, code := runQS(t, "cert", "node", "--ca", ca, "--name", "root", "--host", "127.0.0.1", "--out", dir); code == 0 {
		t.Fatalf("qs cert overwrote a certificate:\n%s", out)
	}
	conf := func(name string) string {
		p := filepath.Join(dir, name+".toml")
		body := fmt.Sprintf("[repl_tls]\ncert = %q\nkey = %q\nca = %q\n",
			filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"), filepath.Join(ca, "ca.pem"))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := startQS(t, t.TempDir(), "--config", conf("root"))
	replica := startQS(t, t.TempDir(), "--config", conf("replica"), "--upstream", root.Addr["repl"])
	px := startQS(t, t.TempDir(), "--config", conf("proxy"), "--upstream", root.Addr["repl"], "--role", "proxy",
		"--replicas", replica.Addr["repl"], "--cache-bytes", "1", "--window", "5")
	ctx := context.Background()
	first, err := root.client(t).Put(ctx, "old", []byte("fetched"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := range 20 {
		r, err := root.client(t).Put(ctx, fmt.Sprint("k", i), []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Index
	}
	for _, p := range []*proc{replica, px} {
		v, err := p.client(t).Get(ctx, "old", client.ReadOptions{MinIndex: last, Wait: 30 * time.Second})
		if err != nil || string(v.Value) != "fetched" || v.Index != first.Index {
			t.Fatalf("%s: %+v %v", p.Dir, v, err)
		}
	}
	// The stranger trusts our CA but holds a certificate of another.
	p := filepath.Join(dir, "stranger.toml")
	os.WriteFile(p, []byte(fmt.Sprintf("[repl_tls]\ncert = %q\nkey = %q\nca = %q\n",
		filepath.Join(dir, "stranger.pem"), filepath.Join(dir, "stranger.key"), filepath.Join(ca, "ca.pem"))), 0o600)
	out, code := runQSTimeout(t, 60*time.Second, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0",
		"--repl", "127.0.0.1:0", "--upstream", root.Addr["repl"], "--config", p)
	if code != 1 || !strings.Contains(out, "learn database id") {
		t.Fatalf("stranger: exit %d (want 1):\n%s", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, root.Addr["http"], `qs_clusterauth_handshakes_total{port="repl",result="bad_cert"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stranger's certificate was not counted as bad_cert")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
