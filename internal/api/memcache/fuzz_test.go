package memcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/quicksilver-kv/qs/internal/store"
)

// FuzzParse feeds arbitrary request lines to the parser. Seeds are in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"get a b", "gets a", "set k 0 0 5 noreply", "delete k 0 noreply", "version", "stats", "quit", "add k 0 0 1", "ms k 2",
		"set k 4294967295 -1 1", "cas k 1 2592001 1 9", "touch k 60 noreply", "gats 100 a b", "gat -1 a"} {
		f.Add([]byte(s))
	}
	lim := limits{maxKeys: 8, maxValue: 100}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // the line reader never hands out a newline
		}
		if hasControl(line) != slices.ContainsFunc(line, func(c byte) bool { return c <= ' ' || c == 0x7f }) {
			t.Fatalf("hasControl(%q) is wrong", line)
		}
		var req request
		perr := parseRequest(line, lim, &req)
		// Reference tokenizer: split on spaces, drop empty fields.
		var fields []string
		for _, f := range strings.Split(string(line), " ") {
			if f != "" {
				fields = append(fields, f)
			}
		}
		refValid := func(k string) bool {
			return len(k) >= 1 && len(k) <= 250 && !strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == 0x7f })
		}
		if len(fields) >= 2 && (fields[0] == "get" || fields[0] == "gets") {
			want := len(fields)-1 <= lim.maxKeys
			for _, k := range fields[1:] {
				want = want && refValid(k)
			}
			if want != (perr == nil) {
				t.Fatalf("%q: refused %v, reference says valid %v", line, perr, want)
			}
		}
		if perr != nil {
			if perr.msg == "" || strings.ContainsAny(perr.msg, "\r\n") {
				t.Fatalf("bad refusal line %q", perr.msg)
			}
			if perr.msg != "ERROR" && !strings.HasPrefix(perr.msg, "CLIENT_ERROR ") && !strings.HasPrefix(perr.msg, "SERVER_ERROR ") {
				t.Fatalf("refusal %q is not an error reply", perr.msg)
			}
			if perr.close && req.dataLen >= 0 {
				t.Fatalf("closing refusal with a known data block: %+v", req)
			}
			return
		}
		validKey := func(k []byte) bool {
			if len(k) == 0 || len(k) > 250 {
				return false
			}
			for _, b := range k {
				if b <= ' ' || b == 0x7f {
					return false
				}
			}
			return withinLine(k, line)
		}
		switch req.cmd {
		case cmdGet, cmdGets:
			if len(req.keys) == 0 || len(req.keys) > lim.maxKeys || len(req.keys) != len(fields)-1 {
				t.Fatalf("%q: %d keys, fields %q", line, len(req.keys), fields)
			}
			for i, k := range req.keys {
				if !validKey(k) || string(k) != fields[i+1] {
					t.Fatalf("%q: key %d is %q", line, i, k)
				}
			}
		case cmdSet:
			if !validKey(req.key) || req.dataLen < 0 || req.dataLen > lim.maxValue || req.noreply != (len(fields) == 6) {
				t.Fatalf("%q: accepted as %+v", line, req)
			}
			// Round trip.
			again := fmt.Sprintf("set %s %d %d %d", req.key, req.flags, req.exptime, req.dataLen)
			if req.noreply {
				again += " noreply"
			}
			var req2 request
			if parseRequest([]byte(again), lim, &req2) != nil || !bytes.Equal(req2.key, req.key) || req2.dataLen != req.dataLen || req2.noreply != req.noreply ||
				req2.flags != req.flags || req2.exptime != req.exptime {
				t.Fatalf("%q: round trip through %q gives %+v", line, again, req2)
			}
		case cmdDelete:
			if !validKey(req.key) || req.dataLen != -1 {
				t.Fatalf("%q: accepted as %+v", line, req)
			}
		case cmdVersion, cmdStats, cmdQuit:
			if len(fields) != 1 {
				t.Fatalf("%q: accepted as %v", line, req.cmd)
			}
		case cmdGat, cmdGats:
			exp, err := strconv.ParseInt(fields[1], 10, 64)
			if len(req.keys) == 0 || len(req.keys) != len(fields)-2 || err != nil || exp != req.exptime {
				t.Fatalf("%q: accepted as %+v", line, req)
			}
		case cmdAdd, cmdReplace, cmdAppend, cmdPrepend, cmdCas:
			want := 6
			if req.cmd == cmdCas {
				want = 7
			}
			if !validKey(req.key) || req.dataLen < 0 || req.dataLen > lim.maxValue || req.noreply != (len(fields) == want) {
				t.Fatalf("%q: accepted as %+v", line, req)
			}
		case cmdIncr, cmdDecr, cmdTouch:
			if !validKey(req.key) || req.noreply != (len(fields) == 4) {
				t.Fatalf("%q: accepted as %+v", line, req)
			}
		case cmdNoop:
			if fields[0] != "mn" {
				t.Fatalf("%q: accepted as %v", line, req.cmd)
			}
		case cmdMetaGet, cmdMetaDelete, cmdMetaArith, cmdMetaSet:
			if len(req.key) == 0 || len(req.key) > 250 || req.meta.nret > len(req.meta.ret) || len(req.meta.opaque) > maxOpaqueLen {
				t.Fatalf("%q: accepted as %+v", line, req)
			}
			if !req.meta.base64 && !validKey(req.key) {
				t.Fatalf("%q: key %q", line, req.key)
			}
			if (req.cmd == cmdMetaSet) != (req.dataLen >= 0) || req.dataLen > lim.maxValue {
				t.Fatalf("%q: data length %d", line, req.dataLen)
			}
		default:
			t.Fatalf("%q: accepted as %v", line, req.cmd)
		}
	})
}

func withinLine(k, line []byte) bool {
	if len(k) == 0 || len(line) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(line)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(k)))
	return p >= start && p+uintptr(len(k)) <= start+uintptr(len(line))
}

// fuzzConfig has small limits so that fuzzing reaches them.
func fuzzConfig() Config {
	return Config{
		MaxLineBytes:    512,
		MaxKeysPerGet:   8,
		MaxValueBytes:   64,
		MaxSwallowBytes: 256,
		MaxReplyBytes:   64 + minReplyRoom,
	}
}

// fuzzBackend fails operations on keys that ask for it.
func fuzzBackend() *fakeBackend {
	b := newFakeBackend()
	b.errFor = func(op string, key []byte) error {
		switch {
		case bytes.HasPrefix(key, []byte("!corrupt")):
			return fmt.Errorf("crc of %q:\r\n%w", key, store.ErrCorrupt)
		case bytes.HasPrefix(key, []byte("!notroot")) && op != "get":
			return store.ErrNotRoot
		case bytes.HasPrefix(key, []byte("!full")) && op != "get":
			return store.ErrDiskFull
		case bytes.HasPrefix(key, []byte("!other")):
			return errors.New("line one\nline two")
		}
		return nil
	}
	return b
}

var statTimes = regexp.MustCompile(`STAT (uptime|time) [0-9]+\r\n`)

// FuzzConn feeds arbitrary bytes to a whole connection with a fake backend.
// The server must not panic, must write only whole, well-formed replies,
// must answer the same whatever way the input is split into reads, and
// must still serve a new connection afterwards. Seeds are in
// testdata/fuzz/FuzzConn.
func FuzzConn(f *testing.F) {
	f.Add([]byte("set a 0 0 1\r\nx\r\nget a b\r\n"), uint8(0))
	f.Add([]byte("set a 3 60 1\r\nx\r\ntouch a 5\r\ngats 0 a b\r\nmg a T9 f t v\r\nappend a 9 0 1\r\ny\r\nget a\r\n"), uint8(3))
	f.Fuzz(func(t *testing.T, input []byte, chunk uint8) {
		var outputs [2]string
		for i, size := range []int{0, 1 + int(chunk)%64} {
			s := New(fuzzConfig(), fuzzBackend(), nil)
			mc := runConn(t, s, string(input), size)
			for _, w := range mc.writes {
				if _, err := checkReplies(w); err != nil {
					t.Fatalf("chunk %d: write %q: %v", size, w, err)
				}
			}
			outputs[i] = statTimes.ReplaceAllString(mc.output(), "")
			// Still healthy.
			mc = runConn(t, s, "set health 0 0 2\r\nok\r\nget health\r\n", 0)
			if got := mc.output(); got != "STORED\r\nVALUE health 0 2\r\nok\r\nEND\r\n" {
				t.Fatalf("server unhealthy after the input: %q", got)
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := s.stats.currConns.Load(); n != 0 {
				t.Fatalf("%d connections left", n)
			}
		}
		if outputs[0] != outputs[1] {
			t.Fatalf("replies depend on how the input is split:\nwhole: %q\nchunk %d: %q", outputs[0], 1+int(chunk)%64, outputs[1])
		}
	})
}
