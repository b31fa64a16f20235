package repl

import (
	"bufio"
	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"io"
	"net"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	panic("not a counter or gauge")
}

func errCount(t *testing.T, db, kind string) float64 {
	return value(metricsOf(t).errors.WithLabelValues(db, kind))
}

// Writes on the root, before and during streaming, reach the replica with
// the same index, hash chain, times and data.
func TestReplicate(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "a", 40) // a backlog

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitCaughtUp(t, rep, root)
	assertSame(t, root, rep)

	writeN(t, root, "b", 40) // live
	waitCaughtUp(t, rep, root)
	assertSame(t, root, rep)

	st := r.State()
	if st.Status != StatusStreaming || st.Source != addr || st.AppliedIndex != root.AppliedIndex() {
		t.Fatalf("state %+v", st)
	}
	if st.Lag <= 0 || st.Lag > time.Minute {
		t.Fatalf("lag %v", st.Lag)
	}
	for _, k := range []string{kindGap, kindHash, kindCRC, kindDecode, kindApply} {
		if n := errCount(t, name, k); n != 0 {
			t.Errorf("%d %s errors", int(n), k)
		}
	}
	if got := entriesApplied(t, name, float64(root.AppliedIndex())); got != float64(root.AppliedIndex()) {
		t.Errorf("entries_applied_total %v, want %d", got, root.AppliedIndex())
	}
}

// entriesApplied returns database name's entries_applied_total once it is
// at least want, or after 5 s: the replica counts entries just after the
// store publishes them.
func entriesApplied(t *testing.T, name string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for value(metricsOf(t).entriesApplied.WithLabelValues(name)) < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return value(metricsOf(t).entriesApplied.WithLabelValues(name))
}

// root → A → B → C: every replica serves the next; all end identical.
func TestChain(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	prev := startServer(t, root, NewProcessID(), nil)
	var stores []*store.Store
	for range 3 {
		st := openStore(t, "", name, root.DBID(), store.Retention{})
		pid := NewProcessID() // one process: its server and its replica share the id
		startReplica(t, st, pid, []string{prev}, nil)
		prev = startServer(t, st, pid, nil)
		stores = append(stores, st)
	}
	writeN(t, root, "k", 60)
	for _, st := range stores {
		waitCaughtUp(t, st, root)
		assertSame(t, root, st)
	}
}

func waitRefused(t *testing.T, r *Replica, code RefuseCode) *RefusedError {
	t.Helper()
	var re *RefusedError
	waitFor(t, "refusal "+code.String(), 10*time.Second, func() bool {
		err := r.State().LastError
		return errors.As(err, &re) && re.Code == code
	})
	return re
}

func TestWrongDBIDRefused(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	write(t, root, "k", "v")
	before := value(metricsOf(t).refusals.WithLabelValues("wrong_dbid"))

	other := openStore(t, "", name, store.DBID{}, store.Retention{}) // a different database
	r, _ := startReplica(t, other, NewProcessID(), []string{addr}, nil)
	re := waitRefused(t, r, RefuseWrongDBID)
	if re.Reason == "" || !errors.Is(re, ErrRefused) {
		t.Fatalf("refusal %+v", re)
	}
	if other.AppliedIndex() != 0 {
		t.Fatal("applied entries of another database")
	}
	if value(metricsOf(t).refusals.WithLabelValues("wrong_dbid")) <= before {
		t.Error("server did not count the refusal")
	}
	if value(metricsOf(t).clientRefused.WithLabelValues(name, "wrong_dbid")) < 1 {
		t.Error("client did not count the refusal")
	}
}

func TestSelfReplicationRefused(t *testing.T) {
	name := dbName(t)
	pid := NewProcessID()
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, pid, nil)
	write(t, root, "k", "v")
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, pid, []string{addr}, nil)
	waitRefused(t, r, RefuseSelf)
	if rep.AppliedIndex() != 0 {
		t.Fatal("replicated from itself")
	}
}

func TestUnknownDatabaseRefused(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	_, m := rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: "nope", ProcessID: NewProcessID()})
	if rf, ok := m.(*Refuse); !ok || rf.Code != RefuseUnknownDatabase {
		t.Fatalf("got %+v", m)
	}
	_, m = rawSession(t, addr, &Hello{Version: 99, Database: root.Name(), ProcessID: NewProcessID()})
	if rf, ok := m.(*Refuse); !ok || rf.Code != RefuseVersion {
		t.Fatalf("got %+v", m)
	}
}

// A client with entries the server lacks is refused with "ahead".
func TestAheadRefused(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	write(t, root, "k", "v")
	_, m := rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: root.Name(), DBID: root.DBID(), ProcessID: NewProcessID(), LastIndex: 5})
	if rf, ok := m.(*Refuse); !ok || rf.Code != RefuseAhead {
		t.Fatalf("got %+v", m)
	}
}

// StopIndex ends the stream with Done after that entry; NewestOnly skips
// history; zero DBID accepts any and learns it from Welcome.
func TestStopIndexAndNewestOnly(t *testing.T) {
	root := openStore(t, "", dbName(t), store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.MaxBatchEntries = 3 })
	writeN(t, root, "k", 12)
	c, m := rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: root.Name(), ProcessID: NewProcessID(), StopIndex: 7})
	w, ok := m.(*Welcome)
	if !ok || w.DBID != root.DBID() || w.NextIndex != 1 || w.AppliedIndex != root.AppliedIndex() {
		t.Fatalf("got %+v", m)
	}
	br := bufio.NewReader(c)
	var v wal.Verifier
	for {
		m, err := ReadMessage(br)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := m.(*Done); ok {
			if d.LastIndex != 7 || v.Index != 7 {
				t.Fatalf("done %d after %d", d.LastIndex, v.Index)
			}
			break
		}
		es := m.(*Entries).Entries
		if len(es) > 3 {
			t.Fatalf("batch of %d over MaxBatchEntries", len(es))
		}
		for i := range es {
			if err := v.Check(&es[i]); err != nil {
				t.Fatal(err)
			}
		}
	}

	c, m = rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: root.Name(), ProcessID: NewProcessID(), NewestOnly: true})
	w = m.(*Welcome)
	if w.NextIndex != root.AppliedIndex()+1 {
		t.Fatalf("newest-only starts at %d", w.NextIndex)
	}
	idx := write(t, root, "new", "x")
	m, err := ReadMessage(bufio.NewReader(c))
	for err == nil {
		if e, ok := m.(*Entries); ok {
			if e.Entries[0].Index != idx {
				t.Fatalf("first entry %d, want %d", e.Entries[0].Index, idx)
			}
			break
		}
		m, err = ReadMessage(c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A byte flipped in transit is caught by the frame checksum: nothing of
// the bad frame is applied and the replica finishes from the next source.
func TestCorruptionInTransit(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	good := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "c", 50)
	// The Welcome frame is 75 bytes; flip a byte inside the first Entries.
	bad, flipped := corruptingProxy(t, good, 75+60)

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	startReplica(t, rep, NewProcessID(), []string{bad, good}, nil)
	waitCaughtUp(t, rep, root)
	assertSame(t, root, rep)
	if !flipped() {
		t.Fatal("the proxy flipped nothing")
	}
	if n := errCount(t, name, kindCRC); n != 1 {
		t.Fatalf("%v crc errors, want 1", n)
	}
	if n := value(metricsOf(t).reconnects.WithLabelValues(name)); n < 1 {
		t.Fatal("no reconnect counted")
	}
}

// lyingSource answers every Hello with a Welcome and then sends the frames
// mk returns (valid frames, possibly wrong entries), then stalls.
func lyingSource(t *testing.T, id store.DBID, mk func(h *Hello) []Message) string {
	return fakeSource(t, id, func(c net.Conn, h *Hello) error {
		for _, m := range mk(h) {
			if err := WriteMessage(c, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// fakeSource answers every Hello with a Welcome, lets send write what it
// will, then stalls; it returns its address.
func fakeSource(t *testing.T, id store.DBID, send func(c net.Conn, h *Hello) error) string {
	ln := listen(t)
	pid := NewProcessID()
	serveConns(t, ln, func(c net.Conn) {
		m, err := ReadMessage(c)
		if err != nil {
			return
		}
		h := m.(*Hello)
		w := &Welcome{Version: ProtocolVersion, ProcessID: pid, DBID: id, AppliedIndex: h.LastIndex + 100, NextIndex: h.LastIndex + 1}
		if WriteMessage(c, w) != nil || send(c, h) != nil {
			return
		}
		var b [1]byte
		c.Read(b[:]) // until the client or cleanup closes
	})
	return ln.Addr().String()
}

// A source sending a well-framed entry whose hash does not chain, or an
// entry out of order, is dropped without applying anything of the batch.
func TestHashMismatchAndGap(t *testing.T) {
	for _, tc := range []struct {
		kind   string
		tamper func(es []wal.Entry) []wal.Entry
	}{
		{kindHash, func(es []wal.Entry) []wal.Entry {
			es[2].Ops[0].Value = []byte("forged") // hash kept: no longer matches
			return es
		}},
		{kindGap, func(es []wal.Entry) []wal.Entry { return append(es[:2], es[3:]...) }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			name := dbName(t)
			root := openStore(t, "", name, store.DBID{}, store.Retention{})
			good := startServer(t, root, NewProcessID(), nil)
			writeN(t, root, "h", 8)
			rep := openStore(t, "", name, root.DBID(), store.Retention{})
			liar := lyingSource(t, root.DBID(), func(h *Hello) []Message {
				es, err := root.ReadLog(h.LastIndex+1, 5, 1<<20)
				if err != nil || len(es) < 5 {
					t.Errorf("read log: %v (%d)", err, len(es))
					return nil
				}
				return []Message{&Entries{Entries: tc.tamper(es)}}
			})
			r, _ := startReplica(t, rep, NewProcessID(), []string{liar, good}, nil)
			waitCaughtUp(t, rep, root)
			assertSame(t, root, rep)
			if n := errCount(t, name, tc.kind); n < 1 {
				t.Fatalf("no %s error counted; last error %v", tc.kind, r.State().LastError)
			}
		})
	}
}

// A source that accepts and never answers, and one that welcomes and then
// goes silent, are both dropped by timeouts; the replica moves on.
func TestStalledSources(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	good := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "s", 5)

	mute := listen(t)
	serveConns(t, mute, func(c net.Conn) {
		io.Copy(io.Discard, c) // reads the Hello, never answers
	})
	silent := lyingSource(t, root.DBID(), func(*Hello) []Message { return nil })

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	// Timeouts of a second against the good source's Progress every 50 ms:
	// a loaded machine does not delay a Progress that long.
	const timeout = time.Second
	start := time.Now()
	r, _ := startReplica(t, rep, NewProcessID(), []string{mute.Addr().String(), silent, good}, func(c *ReplicaConfig) {
		c.HandshakeTimeout = timeout
		c.IdleTimeout = timeout
	})
	waitCaughtUp(t, rep, root)
	assertSame(t, root, rep)
	n := errCount(t, name, kindTimeout)
	if n < 2 {
		t.Fatalf("%v timeouts, want at least 2 (last error %v)", n, r.State().LastError)
	}
	if d := time.Since(start); d < 2*timeout {
		t.Fatalf("caught up after %v: timeouts not honoured", d)
	}
	// The good source idles with Progress messages well inside the idle
	// timeout: the replica stays connected.
	time.Sleep(3 * timeout)
	if got := errCount(t, name, kindTimeout); got != n || r.State().Status != StatusStreaming {
		t.Fatalf("idle good source dropped: %v timeouts after %v, state %+v", got, n, r.State())
	}
}

// A replica behind the retained log is refused with log_truncated.
func TestLogTruncatedRefused(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{MaxEntries: 5})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "t", 40)
	lr, err := root.LogRange()
	if err != nil || lr.First <= 1 {
		t.Fatalf("log not truncated: %+v %v", lr, err)
	}
	c, m := rawSession(t, addr, &Hello{Version: ProtocolVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID(), LastIndex: 1})
	defer c.Close()
	if r, ok := m.(*Refuse); !ok || r.Code != RefuseLogTruncated {
		t.Fatalf("got %+v, want a log_truncated refusal", m)
	}
}

// A replica restarted on its store continues from its applied index: no
// entry is received twice and no error is counted.
func TestReplicaRestart(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "r", 20)

	dir := t.TempDir()
	rep := openStore(t, dir, name, root.DBID(), store.Retention{})
	_, stop := startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitCaughtUp(t, rep, root)
	stop()
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	first := root.AppliedIndex()
	writeN(t, root, "s", 20)

	rep = openStore(t, dir, name, root.DBID(), store.Retention{})
	if rep.AppliedIndex() != first {
		t.Fatalf("reopened at %d, want %d", rep.AppliedIndex(), first)
	}
	applied := value(metricsOf(t).entriesApplied.WithLabelValues(name))
	startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitCaughtUp(t, rep, root)
	assertSame(t, root, rep)
	if got := entriesApplied(t, name, applied+float64(root.AppliedIndex()-first)) - applied; got != float64(root.AppliedIndex()-first) {
		t.Fatalf("applied %v entries after restart, want %d", got, root.AppliedIndex()-first)
	}
	for _, k := range []string{kindGap, kindHash, kindCRC, kindDecode, kindApply, kindRefused} {
		if n := errCount(t, name, k); n != 0 {
			t.Errorf("%d %s errors", int(n), k)
		}
	}
}

// The verification step alone: a batch is accepted whole or not at all.
func TestReceiverCheck(t *testing.T) {
	es := sealed(1, wal.Hash{}, 6)
	var rc receiver
	if err := rc.check(es[:3]); err != nil {
		t.Fatal(err)
	}
	bad := append([]wal.Entry(nil), es[3:]...)
	bad[1].Time++
	err := rc.check(bad)
	var se *streamError
	if !errors.As(err, &se) || se.kind != kindHash || rc.v.Index != 3 {
		t.Fatalf("err %v, verifier at %d", err, rc.v.Index)
	}
	if err := rc.check(es[4:]); !errors.As(err, &se) || se.kind != kindGap {
		t.Fatalf("gap: %v", err)
	}
	if err := rc.check(es[3:]); err != nil || rc.v.Index != 6 {
		t.Fatalf("%v at %d", err, rc.v.Index)
	}
}

func TestConfigValidate(t *testing.T) {
	var sc ServerConfig
	if err := sc.EnsureDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	sc.MaxBatchBytes = MaxPayload
	if sc.Validate() == nil {
		t.Fatal("MaxBatchBytes over the payload limit accepted")
	}
	var rc ReplicaConfig
	if rc.EnsureDefaults(nil).Validate() == nil {
		t.Fatal("no sources accepted")
	}
	if rc.IdleTimeout != 30*time.Second {
		t.Fatalf("idle timeout default %v", rc.IdleTimeout)
	}
}

// Root heartbeats flow to the replica without any data write, keeping its
// lag small and exported.
func TestHeartbeatLag(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // the root's heartbeats (internal/server writes them every second)
		defer close(done)
		for ctx.Err() == nil {
			root.Heartbeat(ctx)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-done }()

	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	// The replica sets its gauge after the store publishes the index.
	waitFor(t, "heartbeats on the replica", 10*time.Second, func() bool {
		return rep.AppliedIndex() >= 10 && value(metricsOf(t).appliedIndex.WithLabelValues(name)) >= 10
	})
	if lag := r.State().Lag; lag <= 0 || lag > 5*time.Second {
		t.Fatalf("lag %v", lag)
	}
	if g := value(metricsOf(t).lag.WithLabelValues(name)); g <= 0 || g > 5 {
		t.Fatalf("lag gauge %v", g)
	}
	if g := value(metricsOf(t).appliedIndex.WithLabelValues(name)); g < 10 {
		t.Fatalf("applied index gauge %v", g)
	}
}

// Shutdown ends live streams and waits for every server goroutine; the
// replica notices and keeps trying without applying anything wrong.
func TestServerShutdownWithClients(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	srv, err := NewServer(ServerConfig{Metrics: metricsOf(t), ProcessID: NewProcessID(), ProgressInterval: 20 * time.Millisecond},
		func(string) (*store.Store, bool) { return root, true }, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	writeN(t, root, "x", 5)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{ln.Addr().String()}, nil)
	waitCaughtUp(t, rep, root)
	conns := value(metricsOf(t).serverConns)
	if conns < 1 {
		t.Fatalf("server_connections %v", conns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if got := value(metricsOf(t).serverConns); got != conns-1 {
		t.Fatalf("server_connections %v after shutdown, want %v", got, conns-1)
	}
	waitFor(t, "replica to notice", 5*time.Second, func() bool { return r.State().Status != StatusStreaming })
	if err := srv.Serve(listen(t)); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	assertSame(t, root, rep)
}

// A replica that has applied nothing yet (its sources unreachable, or a
// bootstrap under way) reports a lag growing from its start, not 0: it
// holds none of the data, and an alert on the lag must see it.
func TestLagOfAnEmptyReplica(t *testing.T) {
	name := dbName(t)
	ln := listen(t)
	dead := ln.Addr().String()
	ln.Close() // nothing listens there
	// A new database: no entry.
	rep := openStore(t, "", name, store.DBID{}, store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{dead}, nil)
	time.Sleep(1200 * time.Millisecond)
	if lag := r.State().Lag; lag < time.Second {
		t.Fatalf("empty replica reports lag %v after 1.2 s", lag)
	}
	waitFor(t, "the lag gauge to grow", 3*time.Second, func() bool {
		return value(metricsOf(t).lag.WithLabelValues(name)) >= 1
	})
}
