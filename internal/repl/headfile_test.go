package repl

import (
	"os"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// An intermediate replica that restarts forwards entries to its children
// at once, with the signed head it saved, before its source sends another
// head (here its source is gone for good): a child's first messages after
// the welcome carry the entries and the head that vouches for them.
func TestRestartedReplicaForwardsSavedHead(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	src := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	writeN(t, root, "a", 40)
	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	mr, stop := startReplica(t, mid, NewProcessID(), []string{src}, func(c *ReplicaConfig) { c.Verifier = verifier })
	waitCaughtUp(t, mid, root)
	want := root.AppliedIndex()
	waitFor(t, "the root's head verified", 30*time.Second, func() bool { return mr.State().SignedIndex == want })
	stop()

	// The restart: a new replica of the same store, whose source never
	// answers again.
	r2, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Sources: []string{"127.0.0.1:1"}, ProcessID: NewProcessID(), Verifier: verifier}, mid, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := r2.Book().Latest(); !ok || h.Index != want {
		t.Fatalf("saved head after the restart: %+v %v, want index %d", h, ok, want)
	}
	addr := startServer(t, mid, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Book: r2.Book()} }
	})
	c, m := rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID()})
	if _, ok := m.(*Welcome); !ok {
		t.Fatalf("first message %T, want a welcome", m)
	}
	var got uint64 // the last entry received
	for i := 0; ; i++ {
		if i == 8 {
			t.Fatalf("no signed head for entry %d in the first %d messages", got, i)
		}
		m, err := ReadMessage(c)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *Entries:
			got = m.Entries[len(m.Entries)-1].Index
		case *Head:
			if err := verifier.Verify(root.DBID(), m.Head); err != nil {
				t.Fatal(err)
			}
			if m.Index == want && got == want {
				return
			}
		case *Progress:
			t.Fatalf("idle progress at entry %d before a head vouching for entry %d", got, want)
		}
	}
}

// A saved head that is damaged, of another database or not signed by the
// root's key is ignored and counted; the replica starts without it.
func TestDamagedSavedHeadIgnored(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	st := openStore(t, "", name, store.DBID{}, store.Retention{})
	writeN(t, st, "a", 3)
	h, err := st.Head()
	if err != nil {
		t.Fatal(err)
	}
	good := encodeHeadFile(st.DBID(), signer.Sign(st.DBID(), h.Index, h.Hash))
	other, _ := testKeys(t)
	damaged := append([]byte{}, good...)
	damaged[30] ^= 1
	for what, b := range map[string][]byte{
		"damaged":          damaged,
		"short":            good[:20],
		"another database": encodeHeadFile(store.DBID{9}, signer.Sign(store.DBID{9}, h.Index, h.Hash)),
		"another key":      encodeHeadFile(st.DBID(), other.Sign(st.DBID(), h.Index, h.Hash)),
	} {
		if err := os.WriteFile(st.Options().Dir+".head", b, 0o644); err != nil {
			t.Fatal(err)
		}
		before := errCount(t, name, kindHeadFile)
		r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Sources: []string{"127.0.0.1:1"}, ProcessID: NewProcessID(), Verifier: verifier}, st, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Book().Latest(); ok {
			t.Errorf("%s head file loaded", what)
		}
		if n := errCount(t, name, kindHeadFile); n != before+1 {
			t.Errorf("%s head file counted %v -> %v", what, before, n)
		}
	}
	if err := os.WriteFile(st.Options().Dir+".head", good, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewReplica(ReplicaConfig{Metrics: metricsOf(t), Sources: []string{"127.0.0.1:1"}, ProcessID: NewProcessID(), Verifier: verifier}, st, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Book().Latest(); !ok || got.Index != h.Index {
		t.Fatalf("good head file: %+v %v", got, ok)
	}
}
