package repl

import (
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// forkedPair returns a root and a replica store of the same database id
// whose logs differ from entry 1 on: each wrote its own first entry.
func forkedPair(t *testing.T) (root, rep *store.Store) {
	t.Helper()
	name := dbName(t)
	root = openStore(t, "", name, store.DBID{}, store.Retention{})
	rep = openStore(t, "", name, root.DBID(), store.Retention{})
	write(t, root, "k", "the root's value")
	write(t, rep, "k", "another value")
	return root, rep
}

// waitForked waits for r to say it forked, and checks it applies
// nothing more and tries no other session.
func waitForked(t *testing.T, r *Replica, rep *store.Store, applied uint64) {
	t.Helper()
	db := rep.Name()
	waitFor(t, "state forked", 30*time.Second, func() bool { return r.State().Status == StatusForked })
	if v := value(metricsOf(t).forked.WithLabelValues(db)); v != 1 {
		t.Fatalf("qs_repl_forked %v", v)
	}
	if n := errCount(t, db, kindForked); n != 1 {
		t.Fatalf("forked errors %v", n)
	}
	sessions := r.State().Sessions
	// A forked replica keeps its state and its data: it neither applies
	// nor reconnects (polled for a while; every check must hold).
	for range 20 {
		time.Sleep(10 * time.Millisecond)
		st := r.State()
		if st.Status != StatusForked || st.Sessions != sessions || rep.AppliedIndex() != applied {
			t.Fatalf("forked replica moved on: %+v", st)
		}
	}
	if v, _ := lookupValue(t, rep, "k"); v != "another value" {
		t.Fatalf("k = %q", v)
	}
}

// A replica whose log forked from its source's, detected by the hash
// chain at the resume point (the source is ahead), says forked and stops.
func TestForkedReplicaAtResumePoint(t *testing.T) {
	root, rep := forkedPair(t)
	write(t, root, "k2", "more")
	addr := startServer(t, root, NewProcessID(), nil)
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitForked(t, r, rep, 1)
}

// With signed heads, a fork is found even with nothing to stream: the
// root's heartbeat signs another hash for the replica's applied index.
func TestForkedReplicaBySignedHead(t *testing.T) {
	signer, verifier := testKeys(t)
	root, rep := forkedPair(t)
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) { c.Verifier = verifier })
	waitForked(t, r, rep, 1)
}

// A replica of a root whose clock runs an hour ahead reports a negative
// lag (unknown: the log is dated in its future), never 0, in its state
// and in qs_repl_lag_seconds.
func TestLagOfALogDatedInTheFuture(t *testing.T) {
	name := dbName(t)
	st, err := store.Open(store.Options{Name: name, Dir: t.TempDir(), MinFreeBytes: 1, BallastBytes: -1, Logger: quiet,
		Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	write(t, st, "k", "v")
	addr := startServer(t, st, NewProcessID(), nil)
	rep := openStore(t, "", name, st.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitCaughtUp(t, rep, st)
	if lag := r.State().Lag; lag > -30*time.Minute {
		t.Fatalf("lag %v, want about -1h", lag)
	}
	r.export()
	if v := value(metricsOf(t).lag.WithLabelValues(name)); v > -1800 {
		t.Fatalf("qs_repl_lag_seconds %v, want about -3600", v)
	}
}
