package memcache

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	lim := limits{maxKeys: 4, maxValue: 100}
	long := strings.Repeat("k", 250)
	tests := []struct {
		line    string
		cmd     command
		keys    []string // get, gets
		key     string   // set, delete
		dataLen int
		noreply bool
		flags   uint32 // the storage commands
		exptime int64  // the storage commands, touch, gat
		// On refusal:
		msg   string
		kind  errKind
		close bool
	}{
		{line: "get a", cmd: cmdGet, keys: []string{"a"}, dataLen: -1},
		{line: "gets a b a", cmd: cmdGets, keys: []string{"a", "b", "a"}, dataLen: -1},
		{line: "get  a   b ", cmd: cmdGet, keys: []string{"a", "b"}, dataLen: -1},
		{line: "get " + long, cmd: cmdGet, keys: []string{long}, dataLen: -1},
		{line: "get \x80\xff", cmd: cmdGet, keys: []string{"\x80\xff"}, dataLen: -1},
		{line: "get a b c d", cmd: cmdGet, keys: []string{"a", "b", "c", "d"}, dataLen: -1},
		{line: "get a b c d e", cmd: cmdGet, msg: "CLIENT_ERROR too many keys: at most 4 per request", kind: kindTooManyKeys, dataLen: -1},
		{line: "get", cmd: cmdGet, msg: "CLIENT_ERROR get needs at least one key", kind: kindBadCommand, dataLen: -1},
		{line: "gets   ", cmd: cmdGets, msg: "CLIENT_ERROR get needs at least one key", kind: kindBadCommand, dataLen: -1},
		{line: "get a " + long + "x", cmd: cmdGet, msg: "CLIENT_ERROR bad key: key 2 is longer than 250 bytes", kind: kindBadKey, dataLen: -1},
		{line: "get a\x01b", cmd: cmdGet, msg: "CLIENT_ERROR bad key: key 1 contains a control character", kind: kindBadKey, dataLen: -1},
		{line: "get a\rb", cmd: cmdGet, msg: "CLIENT_ERROR bad key: key 1 contains a control character", kind: kindBadKey, dataLen: -1},
		{line: "get a\tb", cmd: cmdGet, msg: "CLIENT_ERROR bad key: key 1 contains a control character", kind: kindBadKey, dataLen: -1},
		{line: "get a\x7f", cmd: cmdGet, msg: "CLIENT_ERROR bad key: key 1 contains a control character", kind: kindBadKey, dataLen: -1},

		{line: "set k 0 0 5", cmd: cmdSet, key: "k", dataLen: 5},
		{line: "set k 0 0 0", cmd: cmdSet, key: "k", dataLen: 0},
		{line: "set k 0 0 100 noreply", cmd: cmdSet, key: "k", dataLen: 100, noreply: true},
		{line: "set  k  00  0  007", cmd: cmdSet, key: "k", dataLen: 7},
		{line: "set k 0 0 101", cmd: cmdSet, key: "k", dataLen: 101, msg: "SERVER_ERROR object too large for cache", kind: kindTooLarge},
		{line: "set k 0 0 101 noreply", cmd: cmdSet, key: "k", dataLen: 101, noreply: true, msg: "SERVER_ERROR object too large for cache", kind: kindTooLarge},
		{line: "set k 1 0 5", cmd: cmdSet, key: "k", dataLen: 5, flags: 1},
		{line: "set k 4294967295 0 5", cmd: cmdSet, key: "k", dataLen: 5, flags: 1<<32 - 1},
		{line: "set k 0 60 5", cmd: cmdSet, key: "k", dataLen: 5, exptime: 60},
		{line: "set k 0 -1 5", cmd: cmdSet, key: "k", dataLen: 5, exptime: -1},
		{line: "set k 0 4102444800 5", cmd: cmdSet, key: "k", dataLen: 5, exptime: 4102444800},
		{line: "set k 0 1e3 5", cmd: cmdSet, key: "k", dataLen: 5, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand},
		{line: "set k x 0 5", cmd: cmdSet, key: "k", dataLen: 5, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand},
		{line: "set k 4294967296 0 5", cmd: cmdSet, key: "k", dataLen: 5, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand},
		{line: "set k 0 - 5", cmd: cmdSet, key: "k", dataLen: 5, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand},
		{line: "set k 0 0 5 noreplY", cmd: cmdSet, key: "k", dataLen: 5, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand},
		{line: "set " + long + "x 0 0 5", cmd: cmdSet, key: long + "x", dataLen: 5, msg: "CLIENT_ERROR bad key: key is longer than 250 bytes", kind: kindBadKey},
		{line: "set " + long + "x 0 0 5 noreply", cmd: cmdSet, key: long + "x", dataLen: 5, noreply: true, msg: "CLIENT_ERROR bad key: key is longer than 250 bytes", kind: kindBadKey},
		// Unknown data block length: the connection must close.
		{line: "set k 0 0", cmd: cmdSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "set k 0 0 x", cmd: cmdSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "set k 0 0 -1", cmd: cmdSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "set k 0 0 99999999999999999999999", cmd: cmdSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "set k 0 0 5 noreply x", cmd: cmdSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "set", cmd: cmdSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},

		{line: "delete k", cmd: cmdDelete, key: "k", dataLen: -1},
		{line: "delete k 0", cmd: cmdDelete, key: "k", dataLen: -1},
		{line: "delete k noreply", cmd: cmdDelete, key: "k", noreply: true, dataLen: -1},
		{line: "delete k 0 noreply", cmd: cmdDelete, key: "k", noreply: true, dataLen: -1},
		{line: "delete k 1", cmd: cmdDelete, msg: errDeleteFormat.msg, kind: kindBadCommand, dataLen: -1},
		{line: "delete", cmd: cmdDelete, msg: errDeleteFormat.msg, kind: kindBadCommand, dataLen: -1},
		{line: "delete k 0 noreply x", cmd: cmdDelete, msg: errDeleteFormat.msg, kind: kindBadCommand, dataLen: -1},
		{line: "delete k\x00 noreply", cmd: cmdDelete, key: "k\x00", noreply: true, msg: "CLIENT_ERROR bad key: key contains a control character", kind: kindBadKey, dataLen: -1},

		{line: "version", cmd: cmdVersion, dataLen: -1},
		{line: "version x", cmd: cmdVersion, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, dataLen: -1},
		{line: "stats", cmd: cmdStats, dataLen: -1},
		{line: "stats slabs", cmd: cmdStats, msg: errStatsGroup.msg, kind: kindUnsupported, dataLen: -1},
		{line: "quit", cmd: cmdQuit, dataLen: -1},

		{line: "", msg: "ERROR", kind: kindBadCommand, dataLen: -1},
		{line: "   ", msg: "ERROR", kind: kindBadCommand, dataLen: -1},
		{line: "GET a", msg: "ERROR", kind: kindBadCommand, dataLen: -1},
		{line: "frobnicate", msg: "ERROR", kind: kindBadCommand, dataLen: -1},
		{line: "get\x00", msg: "ERROR", kind: kindBadCommand, dataLen: -1},

		{line: "incr k 1", cmd: cmdIncr, key: "k", dataLen: -1},
		{line: "decr k 18446744073709551615 noreply", cmd: cmdDecr, key: "k", noreply: true, dataLen: -1},
		{line: "incr k -1 noreply", cmd: cmdIncr, key: "k", noreply: true, msg: errDelta.msg, kind: kindBadCommand, dataLen: -1},
		{line: "incr k 18446744073709551616", cmd: cmdIncr, key: "k", msg: errDelta.msg, kind: kindBadCommand, dataLen: -1},
		{line: "touch k 0 noreply", cmd: cmdTouch, key: "k", noreply: true, dataLen: -1},
		{line: "touch k 10 noreply", cmd: cmdTouch, key: "k", noreply: true, exptime: 10, dataLen: -1},
		{line: "gat 0 a b", cmd: cmdGat, keys: []string{"a", "b"}, dataLen: -1},
		{line: "gats 5 a", cmd: cmdGats, keys: []string{"a"}, exptime: 5, dataLen: -1},
		{line: "flush_all", cmd: cmdFlushAll, dataLen: -1},
		{line: "flush_all 0 noreply", cmd: cmdFlushAll, noreply: true, dataLen: -1},
		{line: "flush_all 10 noreply", cmd: cmdFlushAll, noreply: true, msg: errFlushDelay.msg, kind: kindUnsupported, dataLen: -1},
		{line: "flush_all x", cmd: cmdFlushAll, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, dataLen: -1},
		{line: "verbosity 1 noreply", cmd: cmdUnsupported, noreply: true, msg: "CLIENT_ERROR verbosity is not supported", kind: kindUnsupported, dataLen: -1},
		{line: "mg k v", cmd: cmdMetaGet, key: "k", dataLen: -1},
		{line: "mn", cmd: cmdNoop, dataLen: -1},
		{line: "add k 0 0 5", cmd: cmdAdd, key: "k", dataLen: 5},
		{line: "add k 3 0 5 noreply", cmd: cmdAdd, key: "k", dataLen: 5, noreply: true, flags: 3},
		{line: "cas k 7 0 5 99", cmd: cmdCas, key: "k", dataLen: 5, flags: 7},
		{line: "cas k 0 0 5 99 noreply", cmd: cmdCas, key: "k", dataLen: 5, noreply: true},
		{line: "cas k 0 0 5 noreply", cmd: cmdCas, key: "k", dataLen: 5, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand},
		{line: "cas k 0 0 5", cmd: cmdCas, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "ms k 3 T0", cmd: cmdMetaSet, key: "k", dataLen: 3},
		{line: "ms k 3 T9", cmd: cmdMetaSet, key: "k", dataLen: 3},
		{line: "ms k x", cmd: cmdMetaSet, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "append k 0 0", cmd: cmdAppend, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "prepend k 0 0 x", cmd: cmdPrepend, msg: "CLIENT_ERROR bad command line format", kind: kindBadCommand, close: true, dataLen: -1},
		{line: "shutdown", cmd: cmdUnsupported, msg: "CLIENT_ERROR shutdown is not supported", kind: kindUnsupported, dataLen: -1},
	}
	var req request
	for _, tt := range tests {
		perr := parseRequest([]byte(tt.line), lim, &req)
		name := strings.ToValidUTF8(tt.line, "?")
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		if req.cmd != tt.cmd || req.dataLen != tt.dataLen || req.noreply != tt.noreply {
			t.Errorf("%q: cmd %v dataLen %d noreply %v, want %v %d %v",
				name, req.cmd, req.dataLen, req.noreply, tt.cmd, tt.dataLen, tt.noreply)
		}
		if tt.msg != "" {
			if perr == nil {
				t.Errorf("%q: accepted, want %q", name, tt.msg)
				continue
			}
			if perr.msg != tt.msg || perr.kind != tt.kind || perr.close != tt.close {
				t.Errorf("%q: refused with %q kind %v close %v, want %q %v %v",
					name, perr.msg, perr.kind, perr.close, tt.msg, tt.kind, tt.close)
			}
			continue
		}
		if perr != nil {
			t.Errorf("%q: refused with %q", name, perr.msg)
			continue
		}
		if req.flags != tt.flags || req.exptime != tt.exptime {
			t.Errorf("%q: flags %d exptime %d, want %d %d", name, req.flags, req.exptime, tt.flags, tt.exptime)
		}
		var keys []string
		for _, k := range req.keys {
			keys = append(keys, string(k))
		}
		if strings.Join(keys, "|") != strings.Join(tt.keys, "|") {
			t.Errorf("%q: keys %q, want %q", name, keys, tt.keys)
		}
		if string(req.key) != tt.key {
			t.Errorf("%q: key %q, want %q", name, req.key, tt.key)
		}
	}
}

func TestParseNumbers(t *testing.T) {
	for _, tt := range []struct {
		in    string
		limit uint64
		v     uint64
		ok    bool
	}{
		{"0", 10, 0, true},
		{"10", 10, 10, true},
		{"11", 10, 0, false},
		{"4294967295", 1<<32 - 1, 1<<32 - 1, true},
		{"4294967296", 1<<32 - 1, 0, false},
		{"18446744073709551615", 1<<64 - 1, 1<<64 - 1, true},
		{"18446744073709551616", 1<<64 - 1, 0, false},
		{"00000000000000000000001", 1<<64 - 1, 0, false}, // longer than any uint64
		{"", 10, 0, false},
		{"+1", 10, 0, false},
		{"1a", 10, 0, false},
	} {
		v, ok := parseUint([]byte(tt.in), tt.limit)
		if v != tt.v || ok != tt.ok {
			t.Errorf("parseUint(%q, %d) = %d %v, want %d %v", tt.in, tt.limit, v, ok, tt.v, tt.ok)
		}
	}
	for _, tt := range []struct {
		in string
		v  int64
		ok bool
	}{{"0", 0, true}, {"-0", 0, true}, {"-5", -5, true}, {"7", 7, true}, {"-", 0, false}, {"--1", 0, false}} {
		v, ok := parseInt([]byte(tt.in))
		if v != tt.v || ok != tt.ok {
			t.Errorf("parseInt(%q) = %d %v, want %d %v", tt.in, v, ok, tt.v, tt.ok)
		}
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	line := []byte("get key:1 key:2 key:3 key:4 key:5 key:6 key:7 key:8 key:9 key:10")
	set := []byte("set key:1 0 0 100 noreply")
	req := request{keys: make([][]byte, 0, 16)}
	lim := limits{maxKeys: 16, maxValue: 1000}
	allocs := testing.AllocsPerRun(100, func() {
		if parseRequest(line, lim, &req) != nil || parseRequest(set, lim, &req) != nil {
			t.Fatal("refused")
		}
	})
	if allocs != 0 {
		t.Errorf("parseRequest allocates %.1f times per call", allocs)
	}
}

func TestSanitize(t *testing.T) {
	for _, tt := range []struct {
		in    string
		limit int
		want  string
	}{
		{"plain", 10, "plain"},
		{"a\r\nb", 10, "a  b"},
		{"a\x00\x7fb", 10, "a  b"},
		{"abcdef", 3, "abc"},
		{"ab\u00e9", 3, "ab"}, // é is two bytes: cut before it, not inside
		{"a\xffb", 10, "a\ufffdb"},
	} {
		if got := sanitize(tt.in, ' ', tt.limit); got != tt.want {
			t.Errorf("sanitize(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
	if got := errorText(strings.Repeat("x", 2*maxErrorText)); len(got) != maxErrorText {
		t.Errorf("errorText kept %d bytes, want %d", len(got), maxErrorText)
	}
}

func TestBackendFailure(t *testing.T) {
	for _, tt := range sentinels {
		kind, line := backendFailure(tt.err)
		if kind != tt.kind || line != tt.reply {
			t.Errorf("backendFailure(%q) = %v %q, want %v %q", tt.err, kind, line, tt.kind, tt.reply)
		}
	}
}

func TestHasControl(t *testing.T) {
	ref := func(b []byte) bool {
		for _, c := range b {
			if c <= ' ' || c == 0x7f {
				return true
			}
		}
		return false
	}
	// Every byte value at every position of keys of several lengths, on a
	// background of bytes that are allowed (including high ones).
	for n := 1; n <= 20; n++ {
		for pos := range n {
			for v := range 256 {
				for _, bg := range []byte{'a', 0x80, 0xff, '~'} {
					key := bytes.Repeat([]byte{bg}, n)
					key[pos] = byte(v)
					if got, want := hasControl(key), ref(key); got != want {
						t.Fatalf("hasControl(%q) = %v, want %v", key, got, want)
					}
				}
			}
		}
	}
}

// TestExpiresAt: memcached's exptime is relative up to 30 days, an
// absolute Unix time beyond; 0 never expires; negative is due at once.
func TestExpiresAt(t *testing.T) {
	const s = int64(1e9)
	now := int64(1_700_000_000) * s
	for _, c := range []struct{ exptime, want int64 }{
		{0, 0},
		{1, now + s},
		{maxRelativeExptime, now + maxRelativeExptime*s},
		{maxRelativeExptime + 1, (maxRelativeExptime + 1) * s},
		{4102444800, 4102444800 * s},
		{-1, now},
		{1 << 62, 1<<63 - 1},
	} {
		if got := expiresAt(c.exptime, now); got != c.want {
			t.Errorf("expiresAt(%d) = %d, want %d", c.exptime, got, c.want)
		}
	}
	if got := expiresAt(-5, 0); got != 1 {
		t.Errorf("negative exptime at time 0: %d", got)
	}
	for _, c := range []struct {
		expires, want int64
	}{{0, -1}, {now + 60*s, 60}, {now + 60*s - 1, 60}, {now + 1, 1}, {now, 0}, {now - s, 0}} {
		if got := ttl(Attrs{Expires: c.expires}, now); got != c.want {
			t.Errorf("ttl of %d at %d = %d, want %d", c.expires, now, got, c.want)
		}
	}
}
