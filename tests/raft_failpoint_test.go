//go:build qsfailpoints

package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/raftroot"
)

// The tests of this file need the failpoints, which only a qs built with
// the qsfailpoints tag has:
//
//	go test -tags qsfailpoints -run 'TestRaftRestartResumesApplyExactlyOnce' ./tests/

// TestRaftRestartResumesApplyExactlyOnce kills a member (SIGKILL from a
// failpoint) after its Raft state is durable and before it applied the
// committed entries to its store; restarted, it applies each of them
// exactly once: its log and data end identical to the others'.
func TestRaftRestartResumesApplyExactlyOnce(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.startAll()
	lead := c.leader(15 * time.Second)
	var f *raftMember
	for _, m := range c.members {
		if m != lead {
			f = m
			break
		}
	}
	f.p.kill()
	c.start(f, "QS_FAILPOINT=raft-after-persist:20")
	cl := c.client(c.httpAddrs(), 10)
	var acks []raftAck
	// A few keys rewritten with new values: applying a command twice (or
	// skipping one) changes the log, which an identical rewrite would not.
	for i := 0; i < 2000 && f.alive(); i++ {
		k, v := fmt.Sprint("x/", i%5), fmt.Sprint(i)
		res, err := cl.Put(bg, k, []byte(v), nil)
		if err == nil {
			acks = append(acks, raftAck{key: k, value: v, index: res.Index})
		}
	}
	select {
	case <-f.p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the failpoint never fired")
	}
	if !strings.Contains(f.p.out.String(), "failpoint raft-after-persist") {
		t.Fatalf("member died without the failpoint:\n%s", f.p.out.String())
	}
	var committed, applied uint64
	out := f.p.out.String()
	fmt.Sscanf(out[strings.Index(out, "failpoint raft-after-persist"):], "failpoint raft-after-persist: killing the process with raft entries committed up to %d, applied up to %d", &committed, &applied)
	// The store applies without fsync (the Raft log is the durable copy):
	// after SIGKILL it may be further behind than it was.
	got := storeRaftApplied(t, f.dir)
	if committed <= applied || got > applied {
		t.Fatalf("failpoint: committed %d, applied %d; the store says %d", committed, applied, got)
	}
	rs, err := raftroot.ReadState(filepath.Join(f.dir, "default.raft"))
	if err != nil {
		t.Fatal(err)
	}
	if rs.Last < committed {
		t.Fatalf("raft storage holds entries up to %d, below the committed %d", rs.Last, committed)
	}
	t.Logf("killed with raft entries committed up to %d, persisted up to %d, applied up to %d (durably: %d)", committed, rs.Last, applied, got)
	c.start(f)
	for i := 0; i < 50; i++ {
		k := fmt.Sprint("k/after/", i)
		res, err := cl.Put(bg, k, []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, raftAck{key: k, value: "v", index: res.Index})
	}
	c.waitSameApplied(acks[len(acks)-1].index, 30*time.Second)
	checkRaftLog(t, c.checkSameStores(), acks, nil)
}
