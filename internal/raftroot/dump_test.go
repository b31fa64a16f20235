package raftroot

import (
	"crypto/sha256"
	"fmt"
	"os"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/store"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestDumpRaftLog prints a Raft storage's log (QS_RAFT_DUMP=dir); a
// debugging aid, skipped otherwise.
func TestDumpRaftLog(t *testing.T) {
	dir := os.Getenv("QS_RAFT_DUMP")
	if dir == "" {
		t.Skip("set QS_RAFT_DUMP to a raft storage directory")
	}
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hs := &pb.HardState{}
	if v, c, err := db.Get(keyHS); err == nil {
		unseal(v, hs, "hs")
		c.Close()
	}
	fmt.Printf("hardstate term %d vote %d commit %d\n", hs.GetTerm(), hs.GetVote(), hs.GetCommit())
	it, _ := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		e := &pb.Entry{}
		if err := unseal(it.Value(), e, "e"); err != nil {
			t.Fatal(err)
		}
		desc := ""
		if e.GetType() == pb.EntryType_EntryNormal && len(e.GetData()) > 0 {
			c, err := decodeCommand(e.GetData())
			if err != nil {
				desc = err.Error()
			} else {
				h := sha256.Sum256(c.id[:])
				desc = fmt.Sprintf("id %x hb %v", h[:3], c.heartbeat)
				for _, op := range c.batch.Ops {
					desc += " " + string(op.Key)
				}
			}
		}
		fmt.Printf("%d t%d %v %s\n", e.GetIndex(), e.GetTerm(), e.GetType(), desc)
	}
}

// TestDumpStoreLog prints a store's log (QS_STORE_DUMP=dir); a debugging
// aid, skipped otherwise.
func TestDumpStoreLog(t *testing.T) {
	dir := os.Getenv("QS_STORE_DUMP")
	if dir == "" {
		t.Skip("set QS_STORE_DUMP to a store directory")
	}
	st, err := store.Open(store.Options{Dir: dir, ReadOnly: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fmt.Printf("raft applied %d store applied %d\n", st.RaftApplied(), st.AppliedIndex())
	ents, err := st.ReadLog(1, 100000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		desc := ""
		for _, op := range e.Ops {
			desc += " " + string(op.Key)
		}
		fmt.Printf("%d %v%s\n", e.Index, e.Kind, desc)
	}
}
