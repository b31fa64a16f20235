package memcache

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/version"
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
			want: versionReply, alive: true},
		{name: "version", in: "version\r\n", want: versionReply, alive: true},
		{name: "quit", in: "get a\r\nquit\r\nget a\r\n", want: "END\r\n"},
		{name: "unknown", in: "foo\r\nGET a\r\n\r\nversion\r\n", want: "ERROR\r\nERROR\r\nERROR\r\n" + versionReply, alive: true},
		{name: "unsupported", in: "verbosity 1\r\nshutdown\r\nversion\r\n",
			want: "CLIENT_ERROR verbosity is not supported\r\nCLIENT_ERROR shutdown is not supported\r\n" + versionReply, alive: true},
		{name: "flush_all refused where it is off", in: "set a 0 0 1\r\nx\r\nflush_all\r\nflush_all 5\r\nget a\r\n",
			want: "STORED\r\nCLIENT_ERROR " + store.ErrInvalid.Error() + ": flush_all is off\r\n" + errFlushDelay.msg + "\r\nVALUE a 0 1\r\nx\r\nEND\r\n", alive: true},
		{name: "noreply silences refusals of every command", in: "flush_all noreply\r\nverbosity 1 noreply\r\nincr a x noreply\r\n" +
			"touch a 5 noreply\r\nadd a 1 0 1 noreply\r\nx\r\ndelete a x noreply\r\nincr zz 1 noreply\r\nset n 0 0 1\r\nx\r\nincr n 1 noreply\r\nversion\r\n",
			want: "STORED\r\n" + versionReply, alive: true},
		{name: "add", in: "add a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nadd b 0 0 1 noreply\r\nz\r\nget a b\r\n",
			want: "STORED\r\nNOT_STORED\r\nVALUE a 0 1\r\nx\r\nVALUE b 0 1\r\nz\r\nEND\r\n", alive: true},
		{name: "replace", in: "replace a 0 0 1\r\nx\r\nset a 0 0 1\r\nx\r\nreplace a 0 0 2\r\nyy\r\nget a\r\n",
			want: "NOT_STORED\r\nSTORED\r\nSTORED\r\nVALUE a 0 2\r\nyy\r\nEND\r\n", alive: true},
		{name: "append prepend", in: "append a 0 0 1\r\nx\r\nset a 0 0 1\r\nb\r\nappend a 0 0 1\r\nc\r\nprepend a 0 0 1\r\na\r\nget a\r\n",
			want: "NOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\n", alive: true},
		{name: "append beyond the value limit", cfg: smallConfig(), in: "set a 0 0 10\r\n0123456789\r\nappend a 0 0 1\r\nx\r\nget a\r\n",
			want: "STORED\r\nSERVER_ERROR object too large for cache\r\nVALUE a 0 10\r\n0123456789\r\nEND\r\n", alive: true},
		{name: "cas", in: "cas a 0 0 1 1\r\nx\r\nset a 0 0 1\r\nx\r\ncas a 0 0 1 9\r\ny\r\ncas a 0 0 1 0\r\ny\r\ncas a 0 0 1 1\r\nz\r\ngets a\r\n",
			want: "NOT_FOUND\r\nSTORED\r\nEXISTS\r\nEXISTS\r\nSTORED\r\nVALUE a 0 1 2\r\nz\r\nEND\r\n", alive: true},
		{name: "incr decr", in: "incr n 1\r\nset n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr n 18446744073709551615\r\nincr n 2\r\nget n\r\n",
			want: "NOT_FOUND\r\nSTORED\r\n15\r\n0\r\n18446744073709551615\r\n1\r\nVALUE n 0 1\r\n1\r\nEND\r\n", alive: true},
		{name: "incr of a padded number", in: "set n 0 0 4\r\n12  \r\nincr n 1\r\n", want: "STORED\r\n13\r\n", alive: true},
		{name: "incr non-numeric", in: "set n 0 0 2\r\n1x\r\nincr n 1\r\nincr n x\r\nget n\r\n",
			want: "STORED\r\n" + errNonNumeric.msg + "\r\n" + errDelta.msg + "\r\nVALUE n 0 2\r\n1x\r\nEND\r\n", alive: true},
		{name: "touch gat gats", in: "touch a 0\r\nset a 0 0 1\r\nx\r\ntouch a 0\r\ntouch a 10\r\ngat 0 a b\r\ngats 0 a\r\ngat 60 a\r\n",
			// A touch that changes the expiry is a write (the cas unique
			// moves); one that changes nothing is not.
			want: "NOT_FOUND\r\nSTORED\r\nTOUCHED\r\nTOUCHED\r\nVALUE a 0 1\r\nx\r\nEND\r\nVALUE a 0 1 3\r\nx\r\nEND\r\nVALUE a 0 1\r\nx\r\nEND\r\n", alive: true},
		{name: "gats cas follows the touch", in: "set a 5 0 1\r\nx\r\ngats 100 a\r\ngets a\r\nmg a T0 c f t v\r\nmg a c\r\n",
			want: "STORED\r\nVALUE a 5 1 2\r\nx\r\nEND\r\nVALUE a 5 1 2\r\nx\r\nEND\r\nVA 1 c3 f5 t-1\r\nx\r\nHD c3\r\n", alive: true},
		{name: "meta get", in: "mg a v\r\nmg a q v\r\nset a 0 0 2\r\nhi\r\nmg a v k c f s t Oop\r\nmg a q\r\nmg a\r\nmn\r\n",
			want: "EN\r\nSTORED\r\nVA 2 ka c1 f0 s2 t-1 Oop\r\nhi\r\nHD\r\nHD\r\nMN\r\n", alive: true},
		{name: "meta set modes", in: "ms a 2 c k\r\nhi\r\nms a 1 ME\r\nx\r\nms a 1 MA q\r\n!\r\nms a 1 MP\r\n>\r\nms b 1 MR\r\nx\r\nms b 1 C5\r\nx\r\nms a 1 C9\r\nx\r\nmg a v c\r\n",
			want: "HD c1 ka\r\nNS\r\nHD\r\nNS\r\nNF\r\nEX\r\nVA 4 c3\r\n>hi!\r\n", alive: true},
		{name: "meta set refusals", in: "ms a 1 F-3\r\nx\r\nms a 1 F4294967296\r\nx\r\nms a 1 Tx q\r\nx\r\nms a 1 MZ\r\nx\r\nms a 1 I\r\nx\r\nmg a\r\n",
			want: errMetaNumber.msg + "\r\n" + errMetaNumber.msg + "\r\n" + errFormat.msg + "\r\n" + errMetaMode.msg + "\r\n" + errMetaStale.msg + "\r\nEN\r\n", alive: true},
		{name: "meta client flags", in: "ms a 1 F3\r\nx\r\nmg a f v\r\nms a 1 MA F9\r\ny\r\nmg a f\r\nma n N0 J5\r\nms n 1 F4294967295\r\n7\r\nma n\r\nmg n f v\r\nget a\r\n",
			want: "HD\r\nVA 1 f3\r\nx\r\nHD\r\nHD f3\r\nHD\r\nHD\r\nHD\r\nVA 1 f4294967295\r\n8\r\nVALUE a 3 2\r\nxy\r\nEND\r\n", alive: true},
		{name: "meta delete", in: "md a\r\nmd a q\r\nset a 0 0 1\r\nx\r\nmd a C7 q\r\nmd a C1 q k\r\nmd a\r\n",
			want: "NF\r\nNF\r\nSTORED\r\nEX\r\nNF\r\n", alive: true},
		{name: "meta arithmetic", in: "ma n\r\nma n N0 J10 v\r\nma n q\r\nma n MD D3 v t c\r\nma n M- D100 v\r\nset s 0 0 1\r\nx\r\nma s\r\nma n C1\r\n",
			want: "NF\r\nVA 2\r\n10\r\nVA 1 t-1 c3\r\n8\r\nVA 1\r\n0\r\nSTORED\r\n" + errNonNumeric.msg + "\r\nEX\r\n", alive: true},
		{name: "meta base64 keys", in: "ms AAE= 1 b k\r\nx\r\nmg AAE= b k v\r\nmg !! b\r\n",
			want: "HD b kAAE=\r\nVA 1 b kAAE=\r\nx\r\n" + errMetaKey.msg + "\r\n", alive: true},
		{name: "meta refusals", in: "mg a h\r\nmg a zz\r\nmg\r\nma a Dx\r\nmg a O" + strings.Repeat("o", 33) + "\r\nmn\r\n",
			want: errMetaLRU.msg + "\r\n" + errMetaFlag.msg + "\r\nCLIENT_ERROR bad command line format\r\n" + errMetaNumber.msg + "\r\n" + errMetaFlag.msg + "\r\nMN\r\n", alive: true},
		{name: "meta set without length closes", in: "ms a\r\nmn\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "storage without length closes", in: "add a 0 0\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "bad data chunk", in: "set a 0 0 1\r\nxy\r\nget a\r\n",
			want: "CLIENT_ERROR bad data chunk\r\nERROR\r\nEND\r\n", alive: true},
		{name: "bad data chunk terminator", in: "set a 0 0 2\r\nxy\n\nget a\r\n",
			want: "CLIENT_ERROR bad data chunk\r\nEND\r\n", alive: true},
		{name: "unparsable length closes", in: "set a 0 0 x\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "negative length closes", in: "set a 0 0 -1\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "missing length closes", in: "set a 0 0\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		{name: "too many tokens closes", in: "set a 0 0 1 noreply x\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\n"},
		// set, add, replace and cas store flags; append, prepend, incr
		// and decr keep the key's.
		{name: "client flags", in: "set a 123 0 3\r\nabc\r\nget a\r\nappend a 7 0 1\r\nd\r\nprepend a 8 0 1\r\n_\r\ngets a\r\nreplace a 4294967295 0 1\r\n1\r\nincr a 2\r\nget a\r\nadd b 5 0 1\r\nx\r\ncas b 6 0 1 6\r\ny\r\nget b\r\nset a x 0 1\r\nz\r\nset a 4294967296 0 1\r\nz\r\nget a\r\n",
			want: "STORED\r\nVALUE a 123 3\r\nabc\r\nEND\r\nSTORED\r\nSTORED\r\nVALUE a 123 5 3\r\n_abcd\r\nEND\r\nSTORED\r\n3\r\nVALUE a 4294967295 1\r\n3\r\nEND\r\nSTORED\r\nSTORED\r\nVALUE b 6 1\r\ny\r\nEND\r\n" +
				"CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\nVALUE a 4294967295 1\r\n3\r\nEND\r\n", alive: true},
		{name: "exptime stored", in: "set a 0 10 3\r\nabc\r\nget a\r\n", want: "STORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\n", alive: true},
		{name: "bad exptime refused, data skipped", in: "set a 0 1x 3\r\nabc\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\nEND\r\n", alive: true},
		{name: "bad noreply", in: "set a 0 0 1 noreplyx\r\nx\r\nget a\r\n", want: "CLIENT_ERROR bad command line format\r\nEND\r\n", alive: true},
		{name: "bad key in set", in: "set " + key250 + "x 0 0 1\r\nx\r\nversion\r\n",
			want: "CLIENT_ERROR bad key: key is longer than 250 bytes\r\n" + versionReply, alive: true},
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
	t.Parallel()
	for _, tt := range sentinels {
		t.Run(tt.kind.String(), func(t *testing.T) {
			b := newFakeBackend()
			b.put("a", "secret")
			b.getErr, b.setErr, b.deleteErr = tt.err, tt.err, tt.err
			s := New(Config{}, b, nil)
			defer s.Shutdown(context.Background())
			mc := runConn(t, s, "get a\r\ngets a b\r\nset a 0 0 1\r\nx\r\ndelete a\r\nset a 0 0 1 noreply\r\nx\r\nversion\r\n", 1)
			line := tt.reply + "\r\n"
			want := line + line + line + line + versionReply
			if got := mc.output(); got != want {
				t.Fatalf("got\n%q\nwant\n%q", got, want)
			}
			if got := counterValue(s.m.errorsByKind[tt.kind]); got != 5 {
				t.Errorf("errors_total{kind=%q} %v, want 5", tt.kind, got)
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
		"STAT delete_hits 1\r\n", "STAT delete_misses 1\r\n", "STAT version " + version.Version + "\r\n",
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

// TestConditionalCommandsRefusedLikeSet: at a node that takes no writes,
// the commands that read before they write are refused as set is,
// whatever the key holds, and change nothing.
func TestConditionalCommandsRefusedLikeSet(t *testing.T) {
	t.Parallel()
	b := newFakeBackend()
	b.put("n", "x")
	b.setErr = fmt.Errorf("forward to the root: %w", store.ErrNotRoot)
	s := New(Config{}, b, nil)
	mc := runConn(t, s, "incr n 1\r\ndecr zz 1\r\nappend n 0 0 1\r\ny\r\nreplace n 0 0 1\r\ny\r\ntouch n 0\r\ncas n 0 0 1 0\r\ny\r\n"+
		"ma n\r\nms n 1 MA\r\ny\r\nmd n C0\r\nincr n 1 noreply\r\nget n\r\n", 0)
	line := "CLIENT_ERROR writes are accepted only at the root: forward to the root: " + store.ErrNotRoot.Error() + "\r\n"
	if got, want := mc.output(), strings.Repeat(line, 9)+"VALUE n 0 1\r\nx\r\nEND\r\n"; got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if got := counterValue(s.m.errorsByKind[kindBackendNotRoot]); got != 10 {
		t.Errorf("errors_total{kind=backend_not_root} %v, want 10", got)
	}
}

func TestFlushAll(t *testing.T) {
	b := newFakeBackend()
	b.flushAll = true
	b.put("a", "1")
	b.put("b", "2")
	s := New(Config{}, b, nil)
	mc := runConn(t, s, "flush_all\r\nget a b\r\nset a 0 0 1\r\nx\r\nflush_all 0 noreply\r\nget a\r\n", 0)
	if got, want := mc.output(), "OK\r\nEND\r\nSTORED\r\nEND\r\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestContendedKey: a read-modify-write command whose key changes between
// its read and its write every time gives up after maxAttempts with a
// counted SERVER_ERROR, leaving the other writer's value; a key that
// changes once is retried and the command applies.
func TestContendedKey(t *testing.T) {
	t.Parallel()
	b := newFakeBackend()
	b.put("n", "1")
	writes := 0
	b.beforeWriteIf = func(f *fakeBackend, key []byte) {
		writes++
		f.index++
		f.data[string(key)] = fakeValue{[]byte("7"), f.index, Attrs{}}
	}
	s := New(Config{}, b, nil)
	mc := runConn(t, s, "incr n 1\r\nappend n 0 0 1\r\nx\r\nma n\r\nget n\r\n", 0)
	want := strings.Repeat(errContended.msg+"\r\n", 3) + "VALUE n 0 1\r\n7\r\nEND\r\n"
	if got := mc.output(); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if writes != 3*maxAttempts {
		t.Errorf("%d attempts, want %d", writes, 3*maxAttempts)
	}
	if got := counterValue(s.m.errorsByKind[kindContended]); got != 3 {
		t.Errorf("errors_total{kind=contended} %v, want 3", got)
	}
	once := true
	b.beforeWriteIf = func(f *fakeBackend, key []byte) {
		if once {
			once = false
			f.index++
			f.data[string(key)] = fakeValue{[]byte("10"), f.index, Attrs{}}
		}
	}
	mc = runConn(t, s, "incr n 5\r\n", 0)
	if got := mc.output(); got != "15\r\n" {
		t.Fatalf("incr after one concurrent write: %q", got)
	}
}

// TestSilencedRefusalsCounted: a refusal that noreply silences is counted
// all the same.
func TestSilencedRefusalsCounted(t *testing.T) {
	t.Parallel()
	b := newFakeBackend()
	b.put("s", "x")
	s := New(Config{}, b, nil)
	mc := runConn(t, s, "verbosity 1 noreply\r\nverbosity 2 noreply\r\nincr s x noreply\r\nincr s 1 noreply\r\nflush_all 5 noreply\r\n", 0)
	if got := mc.output(); got != "" {
		t.Fatalf("noreply requests answered %q", got)
	}
	if got := counterValue(s.m.errorsByKind[kindUnsupported]); got != 3 {
		t.Errorf("errors_total{kind=unsupported} %v, want 3", got)
	}
	if got := counterValue(s.m.errorsByKind[kindBadCommand]); got != 1 {
		t.Errorf("errors_total{kind=bad_command} %v, want 1", got)
	}
	if got := counterValue(s.m.errorsByKind[kindNonNumeric]); got != 1 {
		t.Errorf("errors_total{kind=non_numeric} %v, want 1", got)
	}
}
