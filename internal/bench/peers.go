package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The durable peers of the getput and propagation scenarios: Redis with
// appendfsync always (every write fsynced to its append-only file before
// the reply; replicas chained with replicaof) and etcd (every put fsynced
// to its write-ahead log). The scenarios start them when their binaries
// are installed, with their data in a temporary directory, and stop them
// at the end; a missing binary leaves the peer out with a note.

// kvConn is one client connection of the getput and propagation
// scenarios, whatever the server speaks.
type kvConn interface {
	set(key string, value []byte) error
	get(key string) (value []byte, found bool, err error)
	Close() error
}

// dialKV opens a connection to t in the protocol it speaks.
func dialKV(ctx context.Context, t *Target, addr string, timeout time.Duration) (kvConn, error) {
	switch {
	case t.Etcd != "":
		return dialEtcd(ctx, addr, timeout)
	case t.Redis != "":
		return dialRedis(ctx, addr, timeout)
	}
	c, err := dialMC(ctx, addr)
	if err != nil {
		return nil, errDial{err}
	}
	return mcKV{c, timeout}, nil
}

// mcKV is a memcache connection (qs, memcached). Like the other kvConns
// it bounds each request by its own deadline.
type mcKV struct {
	*mcConn
	timeout time.Duration
}

func (c mcKV) set(key string, value []byte) error {
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	return c.mcConn.set(key, value)
}

func (c mcKV) get(key string) ([]byte, bool, error) {
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	return c.getOne(key)
}

// redisConn speaks the Redis protocol (RESP2), one command at a time.
type redisConn struct {
	c       net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration
}

func dialRedis(ctx context.Context, addr string, timeout time.Duration) (*redisConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, errDial{err}
	}
	return &redisConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c), timeout: timeout}, nil
}

func (c *redisConn) Close() error { return c.c.Close() }

func (c *redisConn) command(args ...[]byte) error {
	c.c.SetDeadline(time.Now().Add(c.timeout))
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n", len(a))
		c.w.Write(a)
		c.w.WriteString("\r\n")
	}
	return c.w.Flush()
}

func (c *redisConn) line() (string, error) {
	l, err := c.r.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("redis: malformed reply line %q", l)
	}
	return string(l[:len(l)-2]), nil
}

func (c *redisConn) set(key string, value []byte) error {
	if err := c.command([]byte("SET"), []byte(key), value); err != nil {
		return err
	}
	l, err := c.line()
	if err != nil {
		return err
	}
	if l != "+OK" {
		return &ReplyError{Line: l}
	}
	return nil
}

func (c *redisConn) get(key string) ([]byte, bool, error) {
	if err := c.command([]byte("GET"), []byte(key)); err != nil {
		return nil, false, err
	}
	l, err := c.line()
	if err != nil {
		return nil, false, err
	}
	if l == "$-1" {
		return nil, false, nil
	}
	if l[0] != '$' {
		return nil, false, &ReplyError{Line: l}
	}
	n, err := strconv.Atoi(l[1:])
	if err != nil || n < 0 {
		return nil, false, &ReplyError{Line: l}
	}
	v := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, v); err != nil {
		return nil, false, err
	}
	return v[:n], true, nil
}

// etcdKV is one etcd client (one gRPC connection).
type etcdKV struct {
	cli     *clientv3.Client
	timeout time.Duration
}

func dialEtcd(ctx context.Context, addr string, timeout time.Duration) (*etcdKV, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: timeout, Context: ctx})
	if err != nil {
		return nil, errDial{err}
	}
	return &etcdKV{cli: cli, timeout: timeout}, nil
}

func (c *etcdKV) Close() error { return c.cli.Close() }

func (c *etcdKV) set(key string, value []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	_, err := c.cli.Put(ctx, key, string(value))
	return err
}

func (c *etcdKV) get(key string) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	resp, err := c.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, false, err
	}
	return resp.Kvs[0].Value, true, nil
}

// errPeerMissing: the peer's binary is not installed.
var errPeerMissing = errors.New("not installed")

// spawnRedis starts redis-server with appendfsync always on a free
// loopback port, as a replica of replicaOf if it is not empty.
func spawnRedis(ctx context.Context, cfg *Config, name, replicaOf string) (*Target, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server %w", errPeerMissing)
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "redis-bench-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--protected-mode", "no"}
	if replicaOf != "" {
		host, p, _ := net.SplitHostPort(replicaOf)
		args = append(args, "--replicaof", host, p)
	}
	p, err := startProcess(name, exec.Command(bin, args...), &tailBuffer{max: 64 << 10})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.dir = dir
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitListening(ctx, p, addr, cfg.SpawnTimeout); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s: %w; its output:\n%s", name, err, indent(p.Output()))
	}
	return &Target{Name: name, Redis: addr, Spawned: true, proc: p}, nil
}

// spawnEtcd starts a one-member etcd on free loopback ports.
func spawnEtcd(ctx context.Context, cfg *Config) (*Target, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("etcd %w", errPeerMissing)
	}
	dir, err := os.MkdirTemp(cfg.WorkDir, "etcd-bench-")
	if err != nil {
		return nil, err
	}
	cport, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(cport)
	peer := "http://127.0.0.1:" + strconv.Itoa(pport)
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--log-level", "error")
	p, err := startProcess("etcd", cmd, &tailBuffer{max: 64 << 10})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.dir = dir
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cport))
	if err := waitListening(ctx, p, addr, cfg.SpawnTimeout); err != nil {
		p.Stop()
		return nil, fmt.Errorf("etcd: %w; its output:\n%s", err, indent(p.Output()))
	}
	t := &Target{Name: "etcd", Etcd: addr, Spawned: true, proc: p}
	// Ready once it answers a put (the member elects itself first).
	deadline := time.Now().Add(cfg.SpawnTimeout)
	for {
		err := func() error {
			c, err := dialEtcd(ctx, addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			return c.set("bench-ready", []byte("1"))
		}()
		if err == nil {
			return t, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop()
			return nil, fmt.Errorf("etcd took no put within %s: %v; its output:\n%s", cfg.SpawnTimeout, err, indent(p.Output()))
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}
