package tests

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// TestRaftPartitionedLeader cuts the leader off from the other members
// with fault proxies on every Raft link. The majority elects a new leader
// and takes writes; no write sent to the isolated old leader is
// acknowledged; after healing every member converges to the same log.
func TestRaftPartitionedLeader(t *testing.T) {
	c := newRaftCluster(t, 3)
	// links[i][j] carries member i's messages to member j.
	links := map[[2]int]*faultProxy{}
	for i, mi := range c.members {
		var peers []string
		for j, mj := range c.members {
			addr := mj.raft
			if i != j {
				p := newFaultProxy(t, mj.raft)
				links[[2]int{i, j}] = p
				addr = p.Addr()
			}
			peers = append(peers, fmt.Sprintf("%d=%s", mj.id, addr))
		}
		mi.peers = strings.Join(peers, ",")
	}
	c.startAll()
	old := c.leader(15 * time.Second)
	cl := c.client(c.httpAddrs(), 3)
	for i := 0; i < 20; i++ {
		if _, err := cl.Put(bg, fmt.Sprint("before/", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	li := int(old.id - 1)
	partition := func(on bool) {
		for k, p := range links {
			if k[0] == li || k[1] == li {
				p.setStalled(on)
			}
		}
	}
	partition(true)
	t.Logf("member %d (leader) partitioned", old.id)

	var majority []string
	for _, m := range c.members {
		if m != old {
			majority = append(majority, m.http)
		}
	}
	var mu sync.Mutex
	var acks []raftAck
	isolatedAcked := 0
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() { // writes to the isolated old leader: none may be acknowledged
		defer wg.Done()
		iso := c.client([]string{old.http}, 1)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := iso.Put(bg, fmt.Sprint("isolated/", i), []byte("v"), nil); err == nil {
				mu.Lock()
				isolatedAcked++
				mu.Unlock()
			}
		}
	}()
	go func() { // writes to the majority: they go on after an election
		defer wg.Done()
		mc := c.client(majority, 40)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprint("k/majority/", i)
			sent := time.Now()
			res, err := mc.Put(bg, k, []byte("v"), nil)
			if err == nil {
				mu.Lock()
				acks = append(acks, raftAck{key: k, value: "v", index: res.Index, sent: sent, at: time.Now()})
				mu.Unlock()
			}
		}
	}()
	// The old leader steps down (CheckQuorum); the majority has a leader.
	deadline := time.Now().Add(60 * time.Second)
	var newLead uint64
	for time.Now().Before(deadline) && newLead == 0 {
		time.Sleep(100 * time.Millisecond)
		for _, a := range majority {
			if st, err := statusOf(a); err == nil && st.Raft.Leader != 0 && st.Raft.Leader != old.id && st.Raft.State != "" {
				newLead = st.Raft.Leader
			}
		}
	}
	if newLead == 0 {
		t.Fatal("the majority elected no leader within 15s")
	}
	time.Sleep(3 * time.Second) // let writes run on both sides
	st, err := statusOf(old.http)
	if err != nil {
		t.Fatal(err)
	}
	if st.Raft.State == "StateLeader" {
		t.Fatalf("the isolated member still believes it leads: %+v", st.Raft)
	}
	// Stop the writers before healing: once healed, the old leader is an
	// ordinary follower again and may acknowledge.
	close(stop)
	wg.Wait()
	partition(false)
	mu.Lock()
	defer mu.Unlock()
	if isolatedAcked > 0 {
		t.Fatalf("%d writes acknowledged by the isolated old leader", isolatedAcked)
	}
	if len(acks) == 0 {
		t.Fatal("no write acknowledged by the majority")
	}
	c.leader(15 * time.Second)
	c.waitSameApplied(acks[len(acks)-1].index, 30*time.Second)
	checkRaftLog(t, c.checkSameStores(), acks, nil)
	t.Logf("new leader %d; %d majority writes acknowledged, none by the isolated member", newLead, len(acks))
}

// TestRaftSnapshotCatchUp: a member down while the others compact their
// Raft log past it catches up from a snapshot (a checkpoint of a member's
// store fetched over replication), then follows the log.
func TestRaftSnapshotCatchUp(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.toml = "[database.raft]\nsnapshot_entries = 50\ncatch_up_entries = 10\n"
	c.startAll()
	lead := c.leader(15 * time.Second)
	var down *raftMember
	for _, m := range c.members {
		if m != lead {
			down = m
			break
		}
	}
	down.p.kill()
	cl := c.client([]string{lead.http}, 10)
	var acks []raftAck
	for i := 0; i < 300; i++ {
		k := fmt.Sprint("k/", i)
		res, err := cl.Put(bg, k, []byte(strings.Repeat("x", 100)), nil)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, raftAck{key: k, value: strings.Repeat("x", 100), index: res.Index})
	}
	c.start(down)
	c.waitSameApplied(acks[len(acks)-1].index, 30*time.Second)
	c.waitRaftApplied(down, 30*time.Second)
	if n := metricValue(t, down.http, `qs_raft_snapshots_total{db="default",event="received"}`); n < 1 {
		t.Fatalf("the member caught up without a snapshot (received %v)", n)
	}
	checkRaftLog(t, c.checkSameStores(), acks, nil)
}

// TestRaftReplicaFollowsAnyMember: a replica replicates from the members
// (--upstream m1,m2,m3); when its source is killed it moves to another
// member and continues from the same index, without bootstrapping.
func TestRaftReplicaFollowsAnyMember(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.startAll()
	c.leader(15 * time.Second)
	cl := c.client(c.httpAddrs(), 20)
	write := func(prefix string, n int) uint64 {
		var last uint64
		for i := 0; i < n; i++ {
			res, err := cl.Put(bg, fmt.Sprint(prefix, i), []byte("v"), nil)
			if err != nil {
				t.Fatal(err)
			}
			last = res.Index
		}
		return last
	}
	idx := write("a/", 50)
	rdir := t.TempDir()
	rep := startQS(t, rdir, "--upstream", strings.Join(c.replAddrs(), ","))
	waitReplica := func(idx uint64) raftStatus {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := statusOf(rep.Addr["http"])
			if err == nil && st.Applied >= idx {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica at %d, want %d (%v)", st.Applied, idx, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	st := waitReplica(idx)
	var src *raftMember
	for _, m := range c.members {
		if m.repl == st.Source {
			src = m
		}
	}
	if src == nil {
		t.Fatalf("replica source %q is not a member", st.Source)
	}
	src.p.kill()
	idx = write("b/", 50)
	st = waitReplica(idx)
	if st.Source == src.repl {
		t.Fatalf("replica still on the killed member %s", src.repl)
	}
	if st.Bootstrap != nil {
		t.Fatalf("replica bootstrapped: %v", st.Bootstrap)
	}
	c.start(src)
	idx = write("c/", 10)
	c.waitSameApplied(idx, 30*time.Second)
	waitReplica(idx)
	rep.stop()
	c.checkSameStores()
	_, mh, md := storeLog(t, c.members[0].dir)
	_, rh, rd := storeLog(t, rdir)
	if rh.Index > mh.Index || rd.Index != rh.Index {
		t.Fatalf("replica head %d, member %d", rh.Index, mh.Index)
	}
	if rh == mh && rd != md {
		t.Fatalf("replica digest %x differs from the members' %x", rd.Hash[:6], md.Hash[:6])
	}
	t.Logf("replica moved from %s to %s; head %d (members %d)", src.repl, st.Source, rh.Index, mh.Index)
}

// storeRaftApplied reads the Raft index a stopped member's store applied.
func storeRaftApplied(t *testing.T, dir string) uint64 {
	t.Helper()
	st, err := store.Open(store.Options{Name: "default", Dir: filepath.Join(dir, "default"), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return st.RaftApplied()
}

// metricValue reads one sample from a node's /metrics (0 if absent).
// waitRaftApplied waits until member m's Raft status has applied what
// the other live members had applied when it was called. A member that
// catches up from a snapshot shows the checkpoint's index in its store as
// soon as the checkpoint is installed, but finishes the snapshot (and
// counts it received) before its Raft status moves: the store's index
// alone does not say that the install is over.
func (c *raftCluster) waitRaftApplied(m *raftMember, within time.Duration) {
	c.t.Helper()
	var want uint64
	for _, o := range c.members {
		if o == m || !o.alive() {
			continue
		}
		st, err := statusOf(o.http)
		if err != nil {
			c.t.Fatalf("member %d status: %v", o.id, err)
		}
		want = max(want, st.Raft.Applied)
	}
	deadline := time.Now().Add(within)
	for {
		st, err := statusOf(m.http)
		if err == nil && st.Raft.Applied >= want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("member %d: raft applied %d, want %d within %v (err %v)", m.id, st.Raft.Applied, want, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metricValue(t *testing.T, httpAddr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// TestRaftWriteBenchmark (QS_BENCH=1) measures write throughput and
// latency of a 3-member Raft root against a single root, side by side in
// the same run, with qs bench's write scenario (16 HTTP clients, batches
// of 1 then 100 new keys, each waiting for its index). Writes go to the
// leader. QS_BENCH_DURATION sets each phase's length (default 10s).
func TestRaftWriteBenchmark(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("set QS_BENCH=1")
	}
	dur := os.Getenv("QS_BENCH_DURATION")
	if dur == "" {
		dur = "10s"
	}
	single := startQS(t, t.TempDir())
	c := newRaftCluster(t, 3)
	c.startAll()
	lead := c.leader(15 * time.Second)
	out, code := runQSTimeout(t, 10*time.Minute, "bench", "write", "--duration", dur, "--markdown",
		"--target", "single=,http="+single.Addr["http"], "--target", "raft3=,http="+lead.http, "--baseline", "single")
	t.Logf("qs bench write (single root vs 3-member raft root, leader %d):\n%s", lead.id, out)
	if code != 0 {
		t.Fatalf("qs bench exit %d", code)
	}
}

// TestRaftReplaceMember replaces a dead member as docs/operations.md says:
// qs raft remove, qs raft add, then the new member starts with --raft-join
// (learning the database id from a peer) and catches up.
func TestRaftReplaceMember(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.startAll()
	c.leader(15 * time.Second)
	cl := c.client(c.httpAddrs(), 20)
	var acks []raftAck
	write := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			k := fmt.Sprint("k/", prefix, i)
			res, err := cl.Put(bg, k, []byte("v"), nil)
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, raftAck{key: k, value: "v", index: res.Index})
		}
	}
	write("a", 30)
	dead := c.members[2]
	dead.p.kill()
	live := c.members[0].http
	if out, code := runQS(t, "raft", "--addr", live, "remove", "3"); code != 0 {
		t.Fatalf("qs raft remove: %d\n%s", code, out)
	}
	m4 := newRaftMember(t, 4, filepath.Join(t.TempDir(), "m4"))
	out, code := runQS(t, "raft", "--addr", live, "add", "4", m4.raft)
	if code != 0 || !strings.Contains(out, "4="+m4.raft) || strings.Contains(out, "3=") {
		t.Fatalf("qs raft add: %d\n%s", code, out)
	}
	write("b", 30)
	m4.peers = fmt.Sprintf("1=%s,2=%s,4=%s", c.members[0].raft, c.members[1].raft, m4.raft)
	// No db_id: the new member asks a peer for it.
	cmd := m4.command("serve", "--data", m4.dir, "--http", m4.http, "--memcache", "127.0.0.1:0", "--repl", m4.repl,
		"--log-level", "warn", "--node-id", "4", "--raft", m4.raft, "--raft-peers", m4.peers, "--raft-join")
	m4.p = startCmd(t, m4.dir, cmd, 4)
	c.members = []*raftMember{c.members[0], c.members[1], m4}
	write("c", 30)
	c.waitSameApplied(acks[len(acks)-1].index, 30*time.Second)
	st, err := statusOf(m4.http)
	if err != nil || len(st.Raft.Members) != 3 || st.Raft.Members["3"] != "" {
		t.Fatalf("new member's status: %+v %v", st.Raft, err)
	}
	checkRaftLog(t, c.checkSameStores(), acks, nil)
}

// TestRaftMutualTLS: with repl_tls (mutual TLS) the members' Raft traffic
// is encrypted and authenticated too: the cluster works, and a connection
// with a certificate of another CA is refused and counted.
func TestRaftMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "qs test CA")
	other := newCA(t, "some other CA")
	ca.issue(t, dir, "member", 1, 2, 3)
	other.issue(t, dir, "stranger", 1, 2, 3)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.der)
	c := newRaftCluster(t, 3)
	c.toml = fmt.Sprintf("[repl_tls]\ncert = %q\nkey = %q\nca = %q\n",
		filepath.Join(dir, "member.pem"), filepath.Join(dir, "member-key.pem"), filepath.Join(dir, "ca.pem"))
	c.startAll()
	lead := c.leader(15 * time.Second)
	cl := c.client(c.httpAddrs(), 10)
	var acks []raftAck
	for i := 0; i < 20; i++ {
		k := fmt.Sprint("k/", i)
		res, err := cl.Put(bg, k, []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, raftAck{key: k, value: "v", index: res.Index})
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "stranger.pem"), filepath.Join(dir, "stranger-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	before := metricValue(t, lead.http, `qs_raft_message_errors_total{db="default",kind="auth"}`)
	conn, err := tls.Dial("tcp", lead.raft, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true})
	if err == nil {
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("a stranger's TLS connection was served")
	}
	deadline := time.Now().Add(60 * time.Second)
	for metricValue(t, lead.http, `qs_raft_message_errors_total{db="default",kind="auth"}`) != before+1 {
		if time.Now().After(deadline) {
			t.Fatal("the refused TLS connection was not counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitSameApplied(acks[len(acks)-1].index, 30*time.Second)
	checkRaftLog(t, c.checkSameStores(), acks, nil)
}
