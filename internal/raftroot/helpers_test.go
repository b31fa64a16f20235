package raftroot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// member is one in-process member: its store, replication server (for
// snapshot fetches) and Raft node.
type member struct {
	id   uint64
	dir  string
	st   *store.Store
	rs   *repl.Server
	repl string
	node *Node
	cfg  Config
}

type cluster struct {
	t       *testing.T
	dbid    store.DBID
	members map[uint64]*member
	peers   map[uint64]string
	tweak   func(*Config)
	metrics *Metrics // the members', as a process shares one
	// storeTweak, when set, changes a member's store options.
	storeTweak func(id uint64, o *store.Options)
}

func quiet() *slog.Logger {
	if os.Getenv("QS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// freeAddr returns a loopback address that was free a moment ago (Raft
// addresses must be known before start and kept across restarts), with a
// port below the kernel's ephemeral range so that no outgoing connection
// takes it meanwhile.
func freeAddr(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &low)
	}
	for i := 0; low > 12000 && i < 100; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(low-11000)))
		if err == nil {
			ln.Close()
			return ln.Addr().String()
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func newCluster(t *testing.T, n int, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, members: map[uint64]*member{}, peers: map[uint64]string{}, tweak: tweak, metrics: NewMetrics()}
	copy(c.dbid[:], "raftroot-test-id")
	for i := uint64(1); i <= uint64(n); i++ {
		c.peers[i] = freeAddr(t)
	}
	dir := t.TempDir()
	for i := uint64(1); i <= uint64(n); i++ {
		c.start(i, filepath.Join(dir, fmt.Sprint(i)), false)
	}
	return c
}

// start opens member id's store and starts its node.
func (c *cluster) start(id uint64, dir string, join bool) *member {
	t := c.t
	t.Helper()
	o := store.Options{Name: "db", Dir: filepath.Join(dir, "db"), DBID: c.dbid, MinFreeBytes: 1, BallastBytes: -1, Logger: quiet()}
	if c.storeTweak != nil {
		c.storeTweak(id, &o)
	}
	st, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, dir: dir, st: st}
	pid := repl.NewProcessID() // members share this process
	m.rs, err = repl.NewServer(repl.ServerConfig{ProcessID: pid}, func(string) (*store.Store, bool) { return st, true }, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.repl = ln.Addr().String()
	go m.rs.Serve(ln)
	lock := filepath.Join(dir, "bootstrap.lock")
	cfg := Config{Database: "db", NodeID: id, Listen: c.peers[id], Peers: c.peers, Join: join,
		Dir: filepath.Join(dir, "db.raft"), ReplAddr: m.repl, Logger: quiet(), Metrics: c.metrics,
		TickInterval: 20 * time.Millisecond, Heartbeat: -1,
		FetchSnapshot: func(ctx context.Context, src string, minIndex uint64) error {
			r, err := repl.NewReplica(repl.ReplicaConfig{Database: "db", Sources: []string{src}, BootstrapLock: lock, ProcessID: pid}, st, quiet())
			if err != nil {
				return err
			}
			return r.Bootstrap(ctx, src, minIndex)
		}}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	m.cfg = cfg
	if m.node, err = Start(cfg, st); err != nil {
		t.Fatal(err)
	}
	c.members[id] = m
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	if m.node == nil {
		return
	}
	m.node.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	m.rs.Shutdown(ctx)
	cancel()
	m.st.Close()
	m.node = nil
}

// leader waits for a leader that every running member agrees on.
func (c *cluster) leader() *member {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var lead uint64
		agree := true
		for _, m := range c.members {
			if m.node == nil {
				continue
			}
			l := m.node.Status().Leader
			if lead == 0 {
				lead = l
			}
			if l == 0 || l != lead {
				agree = false
			}
		}
		if agree && lead != 0 && c.members[lead] != nil && c.members[lead].node != nil {
			return c.members[lead]
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader agreed on within 60s")
	return nil
}

// writeAt writes b through m once m knows a leader, and again while the
// answer is unavailable (nothing was proposed or applied: a leader
// changing under load), for up to a minute.
func (c *cluster) writeAt(m *member, b store.Batch) store.WriteResult {
	c.t.Helper()
	c.leader()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := m.node.Write(context.Background(), b)
		if err == nil {
			return r
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			c.t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) follower() *member {
	lead := c.leader()
	for _, m := range c.members {
		if m.node != nil && m != lead {
			return m
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// waitConverged waits until every running member's store has the same
// head, and returns it.
func (c *cluster) waitConverged() store.Head {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var first *store.Head
		same := true
		for _, m := range c.members {
			if m.node == nil {
				continue
			}
			h, err := m.st.Head()
			if err != nil {
				c.t.Fatal(err)
			}
			if first == nil {
				first = &h
			} else if h != *first {
				same = false
			}
		}
		if same && first != nil {
			return *first
		}
		if time.Now().After(deadline) {
			for _, m := range c.members {
				if m.node != nil {
					h, _ := m.st.Head()
					c.t.Logf("member %d: store head %d, raft %+v", m.id, h.Index, m.node.Status())
				}
			}
			c.t.Fatal("members did not converge within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkDigests compares every running member's data.
func (c *cluster) checkDigests() {
	c.t.Helper()
	var want *store.Digest
	for _, m := range c.members {
		if m.node == nil {
			continue
		}
		d, err := m.st.Digest()
		if err != nil {
			c.t.Fatal(err)
		}
		if want == nil {
			want = &d
		} else if d != *want {
			c.t.Fatalf("member %d digest %x at %d differs from %x at %d", m.id, d.Hash[:6], d.Index, want.Hash[:6], want.Index)
		}
	}
}

func put(k, v string) store.Batch {
	return store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(k), Value: []byte(v)}}}
}
