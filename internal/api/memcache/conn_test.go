package memcache

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// smallConfig has limits small enough to reach in a test.
func smallConfig() Config {
	return Config{
		MaxLineBytes:    512,
		MaxKeysPerGet:   4,
		MaxValueBytes:   10,
		MaxSwallowBytes: 100,
		MaxReplyBytes:   10 + minReplyRoom,
	}
}

// TestConversations plays scripted conversations on in-memory connections,
// delivering the input whole and one byte at a time: replies must not
// depend on how the input is split.
func TestConversations(t *testing.T) {
	key250 := strings.Repeat("k", 250)
	// A get line of exactly 512 bytes with its CRLF, and one a byte longer.
	line512 := "get " + key250 + " " + key250 + " " + strings.Repeat("x", 510-4-251-251)
	tests := []struct {
		name  string
		cfg   Config
		in    string
		want  string
		alive bool // the connection is still open when the input ends
	}{
		{name: "get miss", in: "get a\r\n", want: "END\r\n", alive: true},
		{name: "set get", in: "set a 0 0 3\r\nabc\r\nget a\r\n", want: "STORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\n", alive: true},
		{name: "gets cas is the key's index", in: "set a 0 0 1\r\nx\r\nset b 0 0 1\r\ny\r\ngets b a\r\n",
			want: "STORED\r\nSTORED\r\nVALUE b 0 1 2\r\ny\r\nVALUE a 0 1 1\r\nx\r\nEND\r\n", alive: true},
		{name: "duplicates and misses", in: "set a 0 0 1\r\nx\r\nget a zz a\r\n",
			want: "STORED\r\nVALUE a 0 1\r\nx\r\nVALUE a 0 1\r\nx\r\nEND\r\n", alive: true},
		{name: "bare newlines", in: "set a 0 0 1\nx\r\nget a\n", want: "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n", alive: true},
		{name: "empty value", in: "set a 0 0 0\r\n\r\nget a\r\n", want: "STORED\r\nVALUE a 0 0\r\n\r\nEND\r\n", alive: true},
		{name: "binary value", in: "set a 0 0 4\r\n\r\n\x00\n\r\nget a\r\n", want: "STORED\r\nVALUE a 0 4\r\n\r\n\x00\n\r\nEND\r\n", alive: true},
		{name: "delete", in: "set a 0 0 1\r\nx\r\ndelete a\r\ndelete a\r\ndelete a 0\r\nget a\r\n",
			want: "STORED\r\nDELETED\r\nNOT_FOUND\r\nNOT_FOUND\r\nEND\r\n", alive: true},
		{name: "noreply", in: "set a 0 0 1 noreply\r\nx\r\ndelete b noreply\r\ndelete a 0 noreply\r\nset c 0 0 1 noreply\r\ny\r\nget a c\r\n",
			want: "VALUE c 0 1\r\ny\r\nEND\r\n", alive: true},
		{name: "noreply silences errors", in: "set a 5 0 1 noreply\r\nx\r\nset a 0 0 11 noreply\r\n01234567890\r\ndelete " + key250 + "x noreply\r\nversion\r\n",
			want: "VERSION quicksilver\r\n", alive: true},
		{name: "version", in: "version\r\n", want: "VERSION quicksilver\r\n", alive: true},
		{name: "quit", in: "get a\r\nquit\r\nget a\r\n", want: "END\r\n"},
		{name: "unknown", in: "foo\r\nGET a\r\n\r\nversion\r\n", want: "ERROR\r\nERROR\r\nERROR\r\nVERSION quicksilver\r\n", alive: true},
		{name: "unsupported", in: "incr a 1\r\ntouch a 1\r\nflush_all\r\nversion\r\n",
			want: "CLIENT_ERROR incr is not supported\r\nCLIENT_ERROR touch is not supported\r\nCLIENT_ERROR flush_all is not supported\r\nVERSION quicksilver\r\n", alive: true},
		{name: "unsupported storage skips data", in: "add a 0 0 5\r\nget a\r\ncas a 0 0 1 7\r\nx\r\nms a 2\r\nxx\r\nget a\r\n",
			want: "CLIENT_ERROR add is not supported\r\nCLIENT_ERROR cas is not supported\r\nCLIENT_ERROR ms is not supported\r\nEND\r\n", alive: true},
		{name: "unsupported storage without length", in: "add a 0 0\r\nget a\r\n", want: "CLIENT_ERROR add is not supported\r\n"},
		{name: "bad data chunk", in: "set a 0 0 1\r\nxy\r\nget a\r\n",
			want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n", alive: true},
		{name: "bad data chunk terminator", in: "set a 0 0 2\r\nxy\n\nget a\r\n",
			want: "CLIENT_ERROR bad data chunk\r\nEND\r\n", alive: true},
		{name: "unparsable length closes", in: "set a 0 0 x\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "negative length closes", in: "set a 0 0 -1\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "missing length closes", in: "set a 0 0\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "too many tokens closes", in: "set a 0 0 1 noreply x\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "flags refused, data skipped", in: "set a 1 0 3\r\nabc\r\nget a\r\n", want: "CLIENT_ERROR " + errFlags.msg[len("CLIENT_ERROR "):] + "\r\nEND\r\n", alive: true},
		{name: "exptime refused, data skipped", in: "set a 0 10 3\r\nabc\r\nget a\r\n", want: errExptime.msg + "\r\nEND\r\n", alive: true},
		{name: "bad noreply", in: "set a 0 0 1 noreplyx\r\nx\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\nEND\r\n", alive: true},
		{name: "bad key in set", in: "set " + key250 + "x 0 0 1\r\nx\r\nversion\r\n",
			want: "CLIENT_ERROR bad key: key is longer than 250 bytes\r\nVERSION quicksilver\r\n", alive: true},
		{name: "bad key in get", in: "get a \x01\r\nget " + key250 + "\r\n",
			want: "CLIENT_ERROR bad key: key 2 contains a control character\r\nEND\r\n", alive: true},
		{name: "get without keys", in: "get\r\nget   \r\n", want: "CLIENT_ERROR get needs at least one key\r\nCLIENT_ERROR get needs at least one key\r\n", alive: true},
		{name: "stats group", in: "stats items\r\n", want: errStatsGroup.msg + "\r\n", alive: true},

		{name: "too many keys", cfg: smallConfig(), in: "get a b c d e\r\nget a b c d\r\n",
			want: "CLIENT_ERROR too many keys: at most 4 per request\r\nEND\r\n", alive: true},
		{name: "too large swallowed", cfg: smallConfig(), in: "set a 0 0 11\r\n01234567890\r\nset a 0 0 10\r\n0123456789\r\nget a\r\n",
			want: "SERVER_ERROR object too large for cache\r\nSTORED\r\nVALUE a 0 10\r\n0123456789\r\nEND\r\n", alive: true},
		{name: "too large closes", cfg: smallConfig(), in: "set a 0 0 99\r\n" + strings.Repeat("x", 99) + "\r\nget a\r\n",
			want: "SERVER_ERROR object too large for cache\r\n"},
		{name: "too large closes despite noreply", cfg: smallConfig(), in: "set a 0 0 99 noreply\r\n" + strings.Repeat("x", 99) + "\r\nget a\r\n",
			want: "SERVER_ERROR object too large for cache\r\n"},
		{name: "line of the limit", cfg: smallConfig(), in: line512 + "\r\n", want: "END\r\n", alive: true},
		{name: "line too long", cfg: smallConfig(), in: line512 + "y\r\nversion\r\n", want: "CLIENT_ERROR line too long\r\n"},
		{name: "line too long without newline", cfg: smallConfig(), in: strings.Repeat("g", 600), want: "CLIENT_ERROR line too long\r\n"},
		{name: "reply too large", cfg: Config{MaxValueBytes: 10, MaxReplyBytes: 10 + minReplyRoom}, in: "set a 0 0 10\r\n0123456789\r\nget" + strings.Repeat(" a", 30) + "\r\nget a\r\n",
			want: "STORED\r\nSERVER_ERROR reply too large: ask for fewer keys per request\r\nVALUE a 0 10\r\n0123456789\r\nEND\r\n", alive: true},
		{name: "truncated data block", in: "set a 0 0 5\r\nab", want: ""},
		{name: "truncated line", in: "get a", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1, 3} {
				s := New(tt.cfg, newFakeBackend(), nil)
				mc := runConn(t, s, tt.in, chunk)
				if got := mc.output(); got != tt.want {
					t.Fatalf("chunk %d: got\n%q\nwant\n%q", chunk, got, tt.want)
				}
				for _, w := range mc.writes {
					if _, err := checkReplies(w); err != nil {
						t.Fatalf("chunk %d: write %q: %v", chunk, w, err)
					}
				}
				// A connection that is still alive ended because the input
				// ended, after reading all of it.
				if alive := len(mc.in) == 0; tt.alive && !alive {
					t.Fatalf("chunk %d: connection closed with %d bytes unread", chunk, len(mc.in))
				}
				s.Shutdown(context.Background())
			}
		})
	}
}

// TestClosingCasesStopReading checks that the connections that must close do
// not answer what follows the offending request.
func TestClosingCasesStopReading(t *testing.T) {
	for _, in := range []string{
		"set a 0 0 x\r\nversion\r\n",
		"set a 0 0 999\r\nversion\r\n",
		strings.Repeat("x", 600) + "\r\nversion\r\n",
		"quit\r\nversion\r\n",
	} {
		s := New(smallConfig(), newFakeBackend(), nil)
		mc := runConn(t, s, in, 0)
		if strings.Contains(mc.output(), "VERSION") {
			t.Errorf("%.20q: answered a request after the connection should have closed: %q", in, mc.output())
		}
		s.Shutdown(context.Background())
	}
}

func TestPipelining(t *testing.T) {
	b := newFakeBackend()
	var in, want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&in, "set k%d 0 0 %d\r\n%s\r\n", i, len(fmt.Sprint(i)), fmt.Sprint(i))
		want.WriteString("STORED\r\n")
	}
	for i := range 300 {
		fmt.Fprintf(&in, "get k%d nope k%d\r\n", i, (i+1)%300)
		fmt.Fprintf(&want, "VALUE k%d 0 %d\r\n%d\r\nVALUE k%d 0 %d\r\n%d\r\nEND\r\n",
			i, len(fmt.Sprint(i)), i, (i+1)%300, len(fmt.Sprint((i+1)%300)), (i+1)%300)
	}
	for _, chunk := range []int{0, 1, 7, 4096} {
		s := New(Config{}, b, nil)
		mc := runConn(t, s, in.String(), chunk)
		if got := mc.output(); got != want.String() {
			t.Fatalf("chunk %d: replies differ (got %d bytes, want %d)", chunk, len(got), want.Len())
		}
		if chunk == 0 && len(mc.writes) > 300+2 {
			// All input arrives at once: replies to the gets go out in few
			// writes (each set flushes what is pending before it waits).
			t.Errorf("chunk %d: %d writes for pipelined requests", chunk, len(mc.writes))
		}
		s.Shutdown(context.Background())
	}
}

func TestBackendErrors(t *testing.T) {
	for _, tt := range sentinels {
		t.Run(tt.kind.String(), func(t *testing.T) {
			b := newFakeBackend()
			b.put("a", "secret")
			b.getErr, b.setErr, b.deleteErr = tt.err, tt.err, tt.err
			s := New(Config{}, b, nil)
			defer s.Shutdown(context.Background())
			before := counterValue(errorsByKind[tt.kind])
			mc := runConn(t, s, "get a\r\ngets a b\r\nset a 0 0 1\r\nx\r\ndelete a\r\nset a 0 0 1 noreply\r\nx\r\nversion\r\n", 1)
			line := tt.reply + "\r\n"
			want := line + line + line + line + "VERSION quicksilver\r\n"
			if got := mc.output(); got != want {
				t.Fatalf("got\n%q\nwant\n%q", got, want)
			}
			if got := counterValue(errorsByKind[tt.kind]) - before; got != 5 {
				t.Errorf("errors_total{kind=%q} rose by %v, want 5", tt.kind, got)
			}
		})
	}
}

// TestCorruptGetSendsNoValue: the backend found good values before it hit
// corrupt data; none of them may be sent.
func TestCorruptGetSendsNoValue(t *testing.T) {
	b := newFakeBackend()
	b.put("good", "value")
	b.errFor = func(op string, key []byte) error {
		if string(key) == "bad" {
			return fmt.Errorf("chunk crc: %w", store.ErrCorrupt)
		}
		return nil
	}
	s := New(Config{}, b, nil)
	defer s.Shutdown(context.Background())
	mc := runConn(t, s, "get good bad good\r\nget good\r\n", 0)
	want := "SERVER_ERROR integrity check failed: chunk crc: qs: integrity check failed\r\nVALUE good 0 5\r\nvalue\r\nEND\r\n"
	if got := mc.output(); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestStats(t *testing.T) {
	b := newFakeBackend()
	b.stats = [][2]string{{"db id", "7"}, {"role", "replica\r\nSTAT evil 1"}}
	s := New(Config{}, b, nil)
	defer s.Shutdown(context.Background())
	mc := runConn(t, s, "set a 0 0 1\r\nx\r\nget a b c\r\ngets a\r\ndelete a\r\ndelete a\r\nstats\r\n", 0)
	out := mc.output()
	if _, err := checkReplies([]byte(out)); err != nil {
		t.Fatal(err)
	}
	stats := out[strings.Index(out, "STAT "):]
	for _, want := range []string{
		"STAT pid ", "STAT uptime ", "STAT curr_connections 1\r\n", "STAT total_connections 1\r\n",
		"STAT cmd_get 4\r\n", "STAT get_hits 2\r\n", "STAT get_misses 2\r\n", "STAT cmd_set 1\r\n",
		"STAT delete_hits 1\r\n", "STAT delete_misses 1\r\n", "STAT version quicksilver\r\n",
		"STAT applied_index 2\r\n", "STAT db_id 7\r\n", "STAT role replica  STAT evil 1\r\n",
	} {
		if !strings.Contains(stats, want) {
			t.Errorf("stats lack %q:\n%s", want, stats)
		}
	}
	if !strings.HasSuffix(stats, "\r\nEND\r\n") {
		t.Errorf("stats do not end with END: %q", stats)
	}
}

// TestSetHoldsNoStaleKey: the set's key must survive the data block moving
// the input buffer (a long key near the end of a full buffer, a big value).
func TestSetHoldsNoStaleKey(t *testing.T) {
	b := newFakeBackend()
	s := New(Config{}, b, nil)
	defer s.Shutdown(context.Background())
	key := strings.Repeat("q", 250)
	pad := strings.Repeat("get p\r\n", 580) // fills most of the first buffer
	value := strings.Repeat("v", 100_000)
	mc := runConn(t, s, pad+"set "+key+" 0 0 100000\r\n"+value+"\r\nget "+key+"\r\n", 0)
	want := strings.Repeat("END\r\n", 580) + "STORED\r\nVALUE " + key + " 0 100000\r\n" + value + "\r\nEND\r\n"
	if got := mc.output(); got != want {
		t.Fatalf("got %d bytes %.80q..., want %d bytes", len(got), got, len(want))
	}
}

func TestGetDoesNotAllocate(t *testing.T) {
	b := newFakeBackend()
	for i := range 20 {
		b.put(fmt.Sprintf("key:%d", i), strings.Repeat("v", 100))
	}
	s := New(Config{}, b, nil)
	defer s.Shutdown(context.Background())
	var line strings.Builder
	line.WriteString("get")
	for i := range 20 {
		fmt.Fprintf(&line, " key:%d", i)
	}
	line.WriteString("\r\n")
	req := line.String()
	rc := &repeatConn{req: []byte(req), left: 10} // warms up the buffers
	c, err := s.register(rc)
	if err != nil {
		t.Fatal(err)
	}
	c.serve()
	const n = 1000
	rc = &repeatConn{req: []byte(req), left: n}
	c, err = s.register(rc)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c.serve()
	runtime.ReadMemStats(&after)
	if rc.left != 0 || rc.written < n*20*100 {
		t.Fatalf("served %d requests, wrote %d bytes", n-rc.left, rc.written)
	}
	// A handful of allocations per connection (buffers), none per request.
	if allocs := after.Mallocs - before.Mallocs; allocs > 50 {
		t.Errorf("%d gets of 20 keys made %d allocations", n, allocs)
	}
}

func TestConfig(t *testing.T) {
	var c Config
	c.EnsureDefaults()
	if c != DefaultConfig() {
		t.Errorf("EnsureDefaults of the zero Config = %+v, want %+v", c, DefaultConfig())
	}
	if err := c.Validate(); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
	big := Config{MaxValueBytes: 32 << 20}
	big.EnsureDefaults()
	if err := big.Validate(); err != nil {
		t.Errorf("defaults around a large MaxValueBytes are invalid: %v", err)
	}
	bad := DefaultConfig()
	bad.MaxLineBytes, bad.IdleTimeout, bad.MaxSwallowBytes = 100, -time.Second, 10
	err := bad.Validate()
	for _, want := range []string{"MaxLineBytes", "IdleTimeout", "MaxSwallowBytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid config")
		}
	}()
	New(bad, newFakeBackend(), nil)
}
