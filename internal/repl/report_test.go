package repl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/store"
)

// sink records the reports a server takes.
type sink struct {
	mu      sync.Mutex
	reports []receivedReport
	err     error // returned to the server
}

type receivedReport struct {
	db   string
	from ProcessID
	body string
}

func (s *sink) take(db string, from ProcessID, body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.reports = append(s.reports, receivedReport{db, from, string(body)})
	return nil
}

func (s *sink) all() []receivedReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]receivedReport(nil), s.reports...)
}

// A replica's reports reach its source's sink over the stream, while it
// replicates, named by the replica's process id.
func TestReportsReachTheSource(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	var got sink
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Reports = got.take
		c.ReportMinInterval = time.Millisecond
	})
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	pid := NewProcessID()
	n := 0
	var mu sync.Mutex
	startReplica(t, rep, pid, []string{addr}, func(c *ReplicaConfig) {
		c.ReportInterval = 20 * time.Millisecond
		c.Report = func() []byte {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n == 2 {
				return nil // skipped
			}
			return []byte("report")
		}
	})
	write(t, root, "k", "v")
	waitCaughtUp(t, rep, root)
	waitFor(t, "three reports", 30*time.Second, func() bool { return len(got.all()) >= 3 })
	for _, r := range got.all() {
		if r.db != name || r.from != pid || r.body != "report" {
			t.Fatalf("report %+v", r)
		}
	}
}

// oldHello reads a Hello as a server speaking protocol versions up to
// newest does: it records the Hello's version, refuses a later one with
// code "version", and returns the Hello to answer otherwise.
func oldHello(c net.Conn, newest uint16, record func(version uint16)) (*Hello, bool) {
	m, err := ReadMessage(c)
	if err != nil {
		return nil, false
	}
	h, ok := m.(*Hello)
	if !ok {
		return nil, false
	}
	record(h.Version)
	if h.Version > newest {
		WriteMessage(c, &Refuse{Code: RefuseVersion, Reason: fmt.Sprintf("protocol version %d not supported (server speaks 1..%d)", h.Version, newest)})
		return nil, false
	}
	return h, true
}

// fakeOldSource behaves like a server that speaks protocol versions up to
// newest: it refuses a Hello of a later version, and ends a stream on any
// byte from the client. It records the versions of the Hellos it got.
func fakeOldSource(t *testing.T, id store.DBID, newest uint16) (addr string, versions func() []uint16, extra func() int) {
	ln := listen(t)
	pid := NewProcessID()
	var mu sync.Mutex
	var vs []uint16
	bytesAfter := 0
	serveConns(t, ln, func(c net.Conn) {
		h, ok := oldHello(c, newest, func(v uint16) {
			mu.Lock()
			vs = append(vs, v)
			mu.Unlock()
		})
		if !ok {
			return
		}
		w := &Welcome{Version: h.Version, ProcessID: pid, DBID: id, AppliedIndex: h.LastIndex, NextIndex: h.LastIndex + 1}
		if WriteMessage(c, w) != nil {
			return
		}
		for {
			if WriteMessage(c, &Progress{AppliedIndex: h.LastIndex}) != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			var b [1]byte
			k, err := c.Read(b[:])
			if k > 0 {
				mu.Lock()
				bytesAfter++
				mu.Unlock()
				return
			}
			if ne, ok := err.(net.Error); err != nil && !(ok && ne.Timeout()) {
				return
			}
		}
	})
	return ln.Addr().String(), func() []uint16 {
			mu.Lock()
			defer mu.Unlock()
			return append([]uint16(nil), vs...)
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return bytesAfter
		}
}

// A source older than reports refuses the Hello of the current version,
// then that of HeadVersion: the replica speaks version 1 to it at once, in
// the same session, streams, and sends it no report.
func TestReportsToAnOlderSource(t *testing.T) {
	name := dbName(t)
	id := store.DBID{7, 7, 7}
	addr, versions, extra := fakeOldSource(t, id, 2)
	rep := openStore(t, "", name, id, store.Retention{})
	reports := 0
	var mu sync.Mutex
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, func(c *ReplicaConfig) {
		c.ReportInterval = 10 * time.Millisecond
		c.Report = func() []byte {
			mu.Lock()
			defer mu.Unlock()
			reports++
			return []byte("report")
		}
	})
	waitFor(t, "streaming from the older source", 30*time.Second, func() bool { return r.State().Status == StatusStreaming })
	// Long enough for many report intervals: none was sent.
	for i := 0; i < 20; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if v := versions(); !slices.Equal(v, []uint16{replicaVersion, RootVersion, HeadVersion, 1}) {
		t.Errorf("hello versions %v, want [%d %d %d 1]", v, replicaVersion, RootVersion, HeadVersion)
	}
	if s := r.State(); s.Sessions != 1 || s.Status != StatusStreaming {
		t.Errorf("state %+v: want one session, streaming", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if reports != 0 || extra() != 0 {
		t.Errorf("%d reports made, %d bytes sent to a version-2 source", reports, extra())
	}
}

// The server's side of reports: a report over the size limit is skipped
// and counted, the stream goes on; reports faster than the minimum
// interval are dropped; a report the sink refuses is counted; any other
// message after the Hello ends the stream.
func TestServerReportBounds(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	var got sink
	addr := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Reports = got.take
		c.ReportMinInterval = time.Hour // the second report of a connection is always too soon
	})
	hello := &Hello{Version: ReportVersion, Database: name, DBID: root.DBID(), ProcessID: NewProcessID()}
	dropped := func(reason string) float64 {
		return testutil.ToFloat64(metricsOf(t).reportsDropped.WithLabelValues(reason))
	}

	c, m := rawSession(t, addr, hello)
	if w, ok := m.(*Welcome); !ok || w.Version != ReportVersion {
		t.Fatalf("answer %#v", m)
	}
	big0, rate0 := dropped(dropTooLarge), dropped(dropRate)
	if err := WriteMessage(c, &Report{Body: bytes.Repeat([]byte("x"), MaxReportBytes+1)}); err != nil {
		t.Fatal(err)
	}
	if err := WriteMessage(c, &Report{Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	if err := WriteMessage(c, &Report{Body: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rate drop counted", 30*time.Second, func() bool { return dropped(dropRate) > rate0 })
	if r := got.all(); len(r) != 1 || r[0].body != "first" {
		t.Errorf("reports taken: %+v", r)
	}
	if dropped(dropTooLarge) != big0+1 {
		t.Error("report over the limit not counted")
	}

	// The sink refuses a report: counted, the stream goes on.
	got.mu.Lock()
	got.err = errors.New("not a report")
	got.mu.Unlock()
	inv0 := dropped(dropInvalid)
	c2, _ := rawSession(t, addr, hello)
	if err := WriteMessage(c2, &Report{Body: []byte("bad")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the invalid report counted", 30*time.Second, func() bool { return dropped(dropInvalid) > inv0 })

	// Another message after the Hello: the server hangs up.
	if err := WriteMessage(c2, &Progress{AppliedIndex: 1}); err != nil {
		t.Fatal(err)
	}
	c2.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		if _, err := ReadMessage(c2); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("server kept the stream after a progress message from the client")
				}
			}
			break
		}
	}

	// A corrupt frame also ends the stream.
	c3, _ := rawSession(t, addr, hello)
	frame, _ := AppendFrame(nil, &Report{Body: []byte("flip")})
	frame[len(frame)-1] ^= 1
	c3.Write(frame)
	c3.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		if _, err := ReadMessage(c3); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("server kept the stream after a corrupt frame")
			}
			break
		}
	}

	// A version-1 client is still disconnected for any byte it sends.
	old := *hello
	old.Version = 1
	c4, _ := rawSession(t, addr, &old)
	if err := WriteMessage(c4, &Report{Body: []byte("early")}); err != nil {
		t.Fatal(err)
	}
	c4.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		if _, err := ReadMessage(c4); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("server kept a version-1 stream that sent a report")
			}
			break
		}
	}
	if r := got.all(); len(r) != 1 {
		t.Errorf("reports taken: %+v", r)
	}
}

func TestReportMessageRoundTrip(t *testing.T) {
	frame, err := AppendFrame(nil, &Report{Body: []byte(`{"v":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMessage(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := m.(*Report); !ok || string(r.Body) != `{"v":1}` || m.Type().String() != "report" {
		t.Fatalf("decoded %#v", m)
	}
	if _, err := decodeReport(make([]byte, MaxReportBytes+1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("report over the limit: %v", err)
	}
}

// A source that refused the current version gets the older version
// chosen for legacyRetry, then the current version again (it may have
// been upgraded).
func TestLegacySourceRetried(t *testing.T) {
	var r Replica
	if v := r.helloVersion("a:1"); v != replicaVersion {
		t.Fatalf("new source: version %d", v)
	}
	r.legacy.Store("a:1", legacySource{at: time.Now(), version: HeadVersion})
	if v := r.helloVersion("a:1"); v != HeadVersion {
		t.Errorf("source that just refused: version %d", v)
	}
	if v := r.helloVersion("b:1"); v != replicaVersion {
		t.Errorf("another source: version %d", v)
	}
	r.legacy.Store("a:1", legacySource{at: time.Now().Add(-legacyRetry - time.Second), version: streamVersion})
	if v := r.helloVersion("a:1"); v != replicaVersion {
		t.Errorf("source that refused long ago: version %d", v)
	}
}
