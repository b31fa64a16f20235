package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// raftCluster is a replicated root of real qs processes. Every member's
// HTTP, replication and Raft sockets are opened once by the test, on
// kernel-chosen ports, and passed to each run of the member by socket
// activation (as systemd would): a member keeps its addresses across
// restarts, and no other process can take them meanwhile.
type raftCluster struct {
	t       *testing.T
	dbid    string
	members []*raftMember
	extra   []string // more serve flags for every member
	toml    string   // more settings of the database in the config file
}

type raftMember struct {
	id               uint64
	dir              string
	http, repl, raft string
	files            []*os.File // the listening sockets, in activationNames order
	peers            string     // this member's --raft-peers
	p                *proc
}

// activationNames are the socket activation names of a member's sockets.
const activationNames = "http:repl:raft-default"

// newRaftMember opens the sockets of member id, kept until the test ends.
func newRaftMember(t *testing.T, id uint64, dir string) *raftMember {
	t.Helper()
	m := &raftMember{id: id, dir: dir}
	for _, addr := range []*string{&m.http, &m.repl, &m.raft} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := ln.(*net.TCPListener).File()
		ln.Close() // f holds the socket
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		*addr = ln.Addr().String()
		m.files = append(m.files, f)
	}
	return m
}

// command is `qs serve args...` run as member m, with its sockets passed
// by socket activation. LISTEN_PID must be the server's own pid: sh sets
// it to $$ and exec keeps that pid.
func (m *raftMember) command(args ...string) *exec.Cmd {
	cmd := exec.Command("sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, qsBin}, args...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("LISTEN_FDS=%d", len(m.files)), "LISTEN_FDNAMES="+activationNames)
	cmd.ExtraFiles = m.files
	return cmd
}

func newRaftCluster(t *testing.T, n int, extra ...string) *raftCluster {
	t.Helper()
	c := &raftCluster{t: t, dbid: "0123456789abcdef0123456789abcdef", extra: extra}
	root := t.TempDir()
	for i := 1; i <= n; i++ {
		c.members = append(c.members, newRaftMember(t, uint64(i), filepath.Join(root, fmt.Sprint("m", i))))
	}
	var peers []string
	for _, m := range c.members {
		peers = append(peers, fmt.Sprintf("%d=%s", m.id, m.raft))
	}
	for _, m := range c.members {
		m.peers = strings.Join(peers, ",")
	}
	return c
}

func (c *raftCluster) startAll() {
	for _, m := range c.members {
		c.start(m)
	}
}

// start runs member m (again) with its addresses; env adds variables.
func (c *raftCluster) start(m *raftMember, env ...string) {
	c.t.Helper()
	cfg := writeConfig(c.t, c.t.TempDir(), fmt.Sprintf("[[database]]\nname = \"default\"\ndb_id = %q\n%s", c.dbid, c.toml))
	args := append([]string{"serve", "--config", cfg, "--data", m.dir, "--http", m.http, "--memcache", "127.0.0.1:0", "--repl", m.repl,
		"--log-level", "warn", "--node-id", fmt.Sprint(m.id), "--node-name", fmt.Sprint("member-", m.id), "--raft", m.raft, "--raft-peers", m.peers}, c.extra...)
	cmd := m.command(args...)
	cmd.Env = append(cmd.Env, env...)
	m.p = startCmd(c.t, m.dir, cmd, 4)
	if m.p.Addr["http"] != m.http || m.p.Addr["raft"] != m.raft {
		c.t.Fatalf("member %d did not use its passed sockets: %v", m.id, m.p.Addr)
	}
	p := m.p
	c.t.Cleanup(func() {
		if c.t.Failed() && os.Getenv("QS_TEST_LOG") != "" {
			c.t.Logf("member %d output:\n%s", m.id, p.out.String())
		}
	})
}

func (m *raftMember) alive() bool {
	if m.p == nil {
		return false
	}
	select {
	case <-m.p.done:
		return false
	default:
		return true
	}
}

func (c *raftCluster) httpAddrs() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.http)
	}
	return out
}

func (c *raftCluster) replAddrs() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.repl)
	}
	return out
}

type raftStatus struct {
	Applied uint64 `json:"applied_index"`
	Raft    struct {
		NodeID  uint64            `json:"node_id"`
		Leader  uint64            `json:"leader"`
		State   string            `json:"state"`
		Term    uint64            `json:"term"`
		Commit  uint64            `json:"commit_index"`
		Applied uint64            `json:"applied_index"`
		Members map[string]string `json:"members"`
	} `json:"raft"`
	Source    string `json:"source"`
	Bootstrap any    `json:"bootstrap"`
}

func statusOf(addr string) (raftStatus, error) {
	var st raftStatus
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + addr + "/v1/default/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// leader waits until the live members agree on a leader that is alive.
func (c *raftCluster) leader(within time.Duration) *raftMember {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var lead uint64
		agree := true
		for _, m := range c.members {
			if !m.alive() {
				continue
			}
			st, err := statusOf(m.http)
			if err != nil || st.Raft.Leader == 0 || (lead != 0 && st.Raft.Leader != lead) {
				agree = false
				break
			}
			lead = st.Raft.Leader
		}
		if agree && lead != 0 && c.members[lead-1].alive() {
			return c.members[lead-1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no agreed leader within %v", within)
	return nil
}

// waitSameApplied waits until every live member has applied the same
// store index, at least min, and returns it.
func (c *raftCluster) waitSameApplied(min uint64, within time.Duration) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var idx uint64
		same := true
		for _, m := range c.members {
			if !m.alive() {
				continue
			}
			st, err := statusOf(m.http)
			if err != nil || (idx != 0 && st.Applied != idx) || st.Applied < min {
				same = false
				break
			}
			idx = st.Applied
		}
		if same && idx != 0 {
			return idx
		}
		if time.Now().After(deadline) {
			for _, m := range c.members {
				st, err := statusOf(m.http)
				c.t.Logf("member %d: applied %d raft %+v err %v", m.id, st.Applied, st.Raft, err)
			}
			c.t.Fatalf("members did not reach the same applied index ≥ %d within %v", min, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *raftCluster) client(servers []string, attempts int) *client.Client {
	c.t.Helper()
	cl, err := client.New(servers, client.Options{Timeout: 8 * time.Second, WriteAttempts: attempts, RetryBackoff: 50 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// storeLog opens a stopped node's store read-only and returns its whole
// retained log, its head and its digest.
func storeLog(t *testing.T, dir string) ([]wal.Entry, store.Head, store.Digest) {
	t.Helper()
	st, err := store.Open(store.Options{Name: "default", Dir: filepath.Join(dir, "default"), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := st.Head()
	if err != nil {
		t.Fatal(err)
	}
	lr, err := st.LogRange()
	if err != nil {
		t.Fatal(err)
	}
	var all []wal.Entry
	for next := lr.First; next <= h.Index; {
		ents, err := st.ReadLog(next, 10000, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 0 {
			t.Fatalf("log read stopped at %d of %d", next, h.Index)
		}
		for _, e := range ents {
			e.Ops = append([]wal.Op(nil), e.Ops...)
			for i := range e.Ops {
				e.Ops[i].Key = append([]byte(nil), e.Ops[i].Key...)
				e.Ops[i].Value = append([]byte(nil), e.Ops[i].Value...)
			}
			all = append(all, e)
		}
		next = ents[len(ents)-1].Index + 1
	}
	d, err := st.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return all, h, d
}

// stopAll stops every live member gracefully.
func (c *raftCluster) stopAll() {
	for _, m := range c.members {
		if m.alive() {
			m.p.stop()
		}
	}
}

// checkSameStores stops the cluster and checks every member holds the same
// log and data digest; it returns the first member's log. Members stop one
// after another and the others keep committing the leader's heartbeats,
// so a log may end with heartbeats another lacks.
func (c *raftCluster) checkSameStores() []wal.Entry {
	c.t.Helper()
	c.stopAll()
	if d := os.Getenv("QS_TEST_KEEP"); d != "" {
		for _, m := range c.members {
			exec.Command("cp", "-a", m.dir, filepath.Join(d, fmt.Sprint("m", m.id))).Run()
		}
	}
	var first []wal.Entry
	var h0 store.Head
	var d0 store.Digest
	for i, m := range c.members {
		ents, h, d := storeLog(c.t, m.dir)
		if i == 0 {
			first, h0, d0 = ents, h, d
			continue
		}
		// Members stop one after another, and those still running commit
		// heartbeats meanwhile: logs may differ by trailing heartbeats
		// (sameUpToHeartbeats), which change no data, so the data digests
		// (not their indexes) must be equal.
		if d.Hash != d0.Hash || d.Keys != d0.Keys || !sameUpToHeartbeats(ents, first) {
			c.t.Errorf("member %d differs from member 1", m.id)
			for j := 0; j < min(len(ents), len(first)); j++ {
				if ents[j].Index != first[j].Index || ents[j].Hash != first[j].Hash {
					c.t.Logf("first difference at log position %d: member %d has %d %v t=%d ops %v; member 1 has %d %v t=%d ops %v", j,
						m.id, ents[j].Index, ents[j].Kind, ents[j].Time, ents[j].Ops, first[j].Index, first[j].Kind, first[j].Time, first[j].Ops)
					break
				}
			}
			c.t.Errorf("member %d: head %d %x digest %x; member 1: head %d %x digest %x",
				m.id, h.Index, h.Hash[:4], d.Hash[:4], h0.Index, h0.Hash[:4], d0.Hash[:4])
			logTail(c.t, m.id, ents, h0.Index)
			logTail(c.t, 1, first, h.Index)
		}
	}
	return first
}

// logTail logs the entries of member id's log past index from, which
// another member's log does not reach: what a failed comparison hinges on.
func logTail(t *testing.T, id uint64, ents []wal.Entry, from uint64) {
	for _, e := range ents {
		if e.Index > from {
			t.Logf("member %d has %d %v t=%d ops %v", id, e.Index, e.Kind, e.Time, e.Ops)
		}
	}
}

var bg = context.Background()

// sameUpToHeartbeats reports whether logs a and b hold the same entries
// at every index both retain, and the entries past the shorter one's last
// index are heartbeats.
func sameUpToHeartbeats(a, b []wal.Entry) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	hashes := make(map[uint64]wal.Hash, len(b))
	for _, e := range b {
		hashes[e.Index] = e.Hash
	}
	common := min(a[len(a)-1].Index, b[len(b)-1].Index)
	for _, e := range a {
		if h, ok := hashes[e.Index]; ok && e.Index <= common && h != e.Hash {
			return false
		}
	}
	for _, e := range append(a[:len(a):len(a)], b...) {
		if e.Index > common && e.Kind != wal.KindHeartbeat {
			return false
		}
	}
	return true
}
