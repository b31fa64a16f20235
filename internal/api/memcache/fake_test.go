package memcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/version"
)

// versionReply is the reply to the version command.
var versionReply = "VERSION " + version.Version + "\r\n"

// fakeBackend is an in-memory Backend: a map and a log index counter. It
// can be told to fail each operation with a given error.
type fakeBackend struct {
	mu    sync.Mutex
	data  map[string]fakeValue
	index uint64

	// getErr makes Get fail after it has called found for every key that
	// exists, so that a reply leaking values of a failed read shows.
	getErr    error
	setErr    error
	deleteErr error
	// setHook, if set, runs inside Set before it stores; an error is
	// returned as Set's.
	setHook func(ctx context.Context) error
	// errFor, if set, picks an error from the operation and key (fuzzing).
	errFor func(op string, key []byte) error
	stats  [][2]string
	// flushAll: flush_all is allowed.
	flushAll bool
	// beforeWriteIf, if set, runs inside WriteIf before the condition is
	// checked, under the lock (a concurrent writer).
	beforeWriteIf func(f *fakeBackend, key []byte)
}

type fakeValue struct {
	value []byte
	index uint64
	attrs Attrs
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{data: make(map[string]fakeValue)}
}

func (f *fakeBackend) Get(keys [][]byte, found func(key, value []byte, index uint64, a Attrs)) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	for _, k := range keys {
		if v, ok := f.data[string(k)]; ok {
			found(k, v.value, v.index, v.attrs)
		}
		if err == nil && f.errFor != nil {
			err = f.errFor("get", k)
		}
	}
	if f.getErr != nil {
		return 0, f.getErr
	}
	return f.index, err
}

func (f *fakeBackend) Set(ctx context.Context, key, value []byte, a Attrs) (uint64, error) {
	f.mu.Lock()
	hook, err := f.setHook, f.setErr
	if err == nil && f.errFor != nil {
		err = f.errFor("set", key)
	}
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return 0, err
		}
	}
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	f.data[string(key)] = fakeValue{bytes.Clone(value), f.index, a}
	return f.index, nil
}

func (f *fakeBackend) Delete(ctx context.Context, key []byte) (uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.deleteErr
	if err == nil && f.errFor != nil {
		err = f.errFor("delete", key)
	}
	if err != nil {
		return 0, false, err
	}
	_, ok := f.data[string(key)]
	if ok {
		f.index++
		delete(f.data, string(key))
	}
	return f.index, ok, nil
}

func (f *fakeBackend) WriteIf(ctx context.Context, key, value []byte, a Attrs, del bool, ifIndex uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.setErr
	if err == nil && f.errFor != nil {
		err = f.errFor("writeif", key)
	}
	if err != nil {
		return 0, err
	}
	if f.beforeWriteIf != nil {
		f.beforeWriteIf(f, key)
	}
	if cur := f.data[string(key)]; cur.index != ifIndex {
		return 0, store.ErrConditionFailed
	}
	f.index++
	if del {
		delete(f.data, string(key))
	} else {
		f.data[string(key)] = fakeValue{bytes.Clone(value), f.index, a}
	}
	return f.index, nil
}

func (f *fakeBackend) FlushAll(ctx context.Context) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setErr != nil {
		return 0, f.setErr
	}
	if !f.flushAll {
		return 0, fmt.Errorf("%w: flush_all is off", store.ErrInvalid)
	}
	clear(f.data)
	f.index++
	return f.index, nil
}

func (f *fakeBackend) Writable() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(f.setErr, store.ErrNotRoot) {
		return f.setErr
	}
	return nil
}

func (f *fakeBackend) Stats() [][2]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][2]string{{"applied_index", strconv.FormatUint(f.index, 10)}}, f.stats...)
}

func (f *fakeBackend) put(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	f.data[key] = fakeValue{[]byte(value), f.index, Attrs{}}
}

// memConn is an in-memory net.Conn: reads come from in, at most chunk bytes
// at a time (0: no limit), then io.EOF; writes are recorded one by one.
type memConn struct {
	in     []byte
	chunk  int
	writes [][]byte
	closed bool
}

func (m *memConn) Read(p []byte) (int, error) {
	if m.closed {
		return 0, net.ErrClosed
	}
	if len(m.in) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if m.chunk > 0 {
		n = min(n, m.chunk)
	}
	n = copy(p[:n], m.in)
	m.in = m.in[n:]
	return n, nil
}

func (m *memConn) Write(p []byte) (int, error) {
	if m.closed {
		return 0, net.ErrClosed
	}
	m.writes = append(m.writes, bytes.Clone(p))
	return len(p), nil
}

func (m *memConn) output() string { return string(bytes.Join(m.writes, nil)) }

func (m *memConn) Close() error                       { m.closed = true; return nil }
func (m *memConn) LocalAddr() net.Addr                { return memAddr{} }
func (m *memConn) RemoteAddr() net.Addr               { return memAddr{} }
func (m *memConn) SetDeadline(t time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(t time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

// runConn serves input on an in-memory connection of s and returns the
// connection after it ended.
func runConn(t testing.TB, s *Server, input string, chunk int) *memConn {
	t.Helper()
	mc := &memConn{in: []byte(input), chunk: chunk}
	c, err := s.register(mc)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	c.serve()
	if !mc.closed {
		t.Fatalf("connection not closed after serve returned")
	}
	return mc
}

// checkReplies checks that b is a sequence of complete, well-formed replies
// and returns how many there are. A VALUE reply with its data counts as
// part of the get reply that END (or an error) completes; STAT lines count
// with their END.
func checkReplies(b []byte) (int, error) {
	n := 0
	inGet, inStats := false, false
	for len(b) > 0 {
		if b[0] == binResMagic && !inGet && !inStats {
			if len(b) < binHdrLen {
				return n, fmt.Errorf("partial binary header %q", b)
			}
			body := int(binary.BigEndian.Uint32(b[8:]))
			if len(b) < binHdrLen+body || int(b[4])+int(binary.BigEndian.Uint16(b[2:])) > body {
				return n, fmt.Errorf("bad binary reply %q", b)
			}
			b = b[binHdrLen+body:]
			n++
			continue
		}
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return n, fmt.Errorf("partial reply line %q", b)
		}
		line := string(b[:i])
		b = b[i+2:]
		if bytes.IndexByte([]byte(line), '\n') >= 0 || bytes.IndexByte([]byte(line), '\r') >= 0 {
			return n, fmt.Errorf("line break inside reply line %q", line)
		}
		word, rest, _ := bytes.Cut([]byte(line), []byte(" "))
		switch w := string(word); {
		case w == "VALUE" && !inStats:
			f := bytes.Fields(rest)
			if len(f) != 3 && len(f) != 4 {
				return n, fmt.Errorf("bad VALUE line %q", line)
			}
			if _, err := strconv.ParseUint(string(f[1]), 10, 32); err != nil {
				return n, fmt.Errorf("bad flags in VALUE line %q", line)
			}
			size, err := strconv.Atoi(string(f[2]))
			if err != nil || size < 0 || len(b) < size+2 || string(b[size:size+2]) != "\r\n" {
				return n, fmt.Errorf("bad VALUE data after %q", line)
			}
			b = b[size+2:]
			inGet = true
		case w == "STAT" && !inGet:
			if len(bytes.Fields(rest)) < 2 {
				return n, fmt.Errorf("bad STAT line %q", line)
			}
			inStats = true
		case w == "END":
			inGet, inStats = false, false
			n++
		case inStats:
			return n, fmt.Errorf("%q inside stats reply", line)
		case w == "SERVER_ERROR" || w == "CLIENT_ERROR":
			if inGet {
				return n, fmt.Errorf("error %q after VALUE: partial get reply", line)
			}
			if len(rest) == 0 {
				return n, fmt.Errorf("error without text %q", line)
			}
			n++
		case inGet:
			return n, fmt.Errorf("%q inside get reply", line)
		case w == "VA":
			f := bytes.Fields(rest)
			size := -1
			if len(f) > 0 {
				size, _ = strconv.Atoi(string(f[0]))
			}
			if size < 0 || len(b) < size+2 || string(b[size:size+2]) != "\r\n" {
				return n, fmt.Errorf("bad VA data after %q", line)
			}
			b = b[size+2:]
			n++
		case line == "ERROR" || line == "STORED" || line == "DELETED" || line == "NOT_FOUND" ||
			line == "NOT_STORED" || line == "EXISTS" || line == "TOUCHED" || line == "MN" ||
			w == "HD" || w == "NS" || w == "EX" || w == "NF" || line == "EN" ||
			w == "VERSION" && len(rest) > 0:
			n++
		case len(line) > 0 && strings.Trim(line, "0123456789") == "":
			n++ // incr, decr
		default:
			return n, fmt.Errorf("unknown reply line %q", line)
		}
	}
	if inGet || inStats {
		return n, errors.New("get or stats reply without END")
	}
	return n, nil
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// sentinel errors of the store, wrapped as a backend would.
var sentinels = []struct {
	err   error
	kind  errKind
	reply string
}{
	{fmt.Errorf("set k: %w (root is 10.0.0.1)", store.ErrNotRoot), kindBackendNotRoot,
		"CLIENT_ERROR writes are accepted only at the root: set k: qs: this node is not the write root for the database (root is 10.0.0.1)"},
	{store.ErrTooLarge, kindBackendTooLarge, "CLIENT_ERROR qs: too large"},
	{store.ErrInvalid, kindBackendInvalid, "CLIENT_ERROR qs: invalid request"},
	{store.ErrDiskFull, kindBackendDiskFull, "SERVER_ERROR disk full: qs: disk full"},
	{store.ErrWriteFailed, kindBackendWriteFailed, "SERVER_ERROR qs: durable commit failed"},
	{fmt.Errorf("value crc of k:\r\n%w", store.ErrCorrupt), kindBackendCorrupt,
		"SERVER_ERROR integrity check failed: value crc of k:  qs: integrity check failed"},
	{store.ErrClosed, kindBackendClosed, "SERVER_ERROR qs: store closed"},
	{context.Canceled, kindBackendCanceled, "SERVER_ERROR context canceled"},
	{errors.New("boom\nsecond line"), kindBackendOther, "SERVER_ERROR boom second line"},
}
