package memcache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
)

// binReq builds a binary request.
func binReq(op byte, key, extras, value string, cas uint64, opaque uint32) string {
	b := []byte{binReqMagic, op}
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, byte(len(extras)), 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(extras)+len(key)+len(value)))
	b = binary.BigEndian.AppendUint32(b, opaque)
	b = binary.BigEndian.AppendUint64(b, cas)
	return string(b) + extras + key + value
}

// binRes builds the binary response the server must send.
func binRes(op byte, status uint16, key, extras, value string, cas uint64, opaque uint32) string {
	b := appendBinHeader(nil, op, len(key), len(extras), status, len(extras)+len(key)+len(value), opaque, cas)
	return string(b) + extras + key + value
}

// storeExtras are the extras of set, add and replace.
func storeExtras(flags, exptime uint32) string {
	return string(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, flags), exptime))
}

// arithExtras are the extras of incr and decr.
func arithExtras(delta, initial uint64, exptime uint32) string {
	b := binary.BigEndian.AppendUint64(nil, delta)
	b = binary.BigEndian.AppendUint64(b, initial)
	return string(binary.BigEndian.AppendUint32(b, exptime))
}

func u64(v uint64) string { return string(binary.BigEndian.AppendUint64(nil, v)) }

const noFlags = "\x00\x00\x00\x00"

func TestBinaryConversations(t *testing.T) {
	se := storeExtras(0, 0)
	tests := []struct {
		name string
		cfg  Config
		in   []string
		want []string
	}{
		{name: "get set getk",
			in: []string{binReq(opGet, "a", "", "", 0, 1), binReq(opSet, "a", se, "hi", 0, 2), binReq(opGet, "a", "", "", 0, 3),
				binReq(opGetK, "a", "", "", 0, 4), binReq(opGetQ, "zz", "", "", 0, 5), binReq(opGetKQ, "a", "", "", 0, 6), binReq(opGetK, "zz", "", "", 0, 7)},
			want: []string{binRes(opGet, statusNotFound, "", "", "Not found", 0, 1), binRes(opSet, statusOK, "", "", "", 1, 2),
				binRes(opGet, statusOK, "", noFlags, "hi", 1, 3), binRes(opGetK, statusOK, "a", noFlags, "hi", 1, 4),
				binRes(opGetKQ, statusOK, "a", noFlags, "hi", 1, 6), binRes(opGetK, statusNotFound, "zz", "", "", 0, 7)}},
		{name: "conditional storage",
			in: []string{binReq(opAdd, "a", se, "x", 0, 1), binReq(opAdd, "a", se, "y", 0, 2), binReq(opReplace, "b", se, "y", 0, 3),
				binReq(opAppend, "a", "", "!", 0, 4), binReq(opPrepend, "a", "", ">", 0, 5), binReq(opSet, "a", se, "z", 1, 6),
				binReq(opSet, "a", se, "z", 3, 7), binReq(opAppend, "b", "", "!", 0, 8), binReq(opGet, "a", "", "", 0, 9)},
			want: []string{binRes(opAdd, statusOK, "", "", "", 1, 1), binRes(opAdd, statusExists, "", "", "Data exists for key.", 0, 2),
				binRes(opReplace, statusNotFound, "", "", "Not found", 0, 3), binRes(opAppend, statusOK, "", "", "", 2, 4),
				binRes(opPrepend, statusOK, "", "", "", 3, 5), binRes(opSet, statusExists, "", "", "Data exists for key.", 0, 6),
				binRes(opSet, statusOK, "", "", "", 4, 7), binRes(opAppend, statusNotStored, "", "", "Not stored.", 0, 8),
				binRes(opGet, statusOK, "", noFlags, "z", 4, 9)}},
		{name: "delete",
			in: []string{binReq(opDelete, "a", "", "", 0, 1), binReq(opSet, "a", se, "x", 0, 2), binReq(opDelete, "a", "", "", 9, 3),
				binReq(opDeleteQ, "a", "", "", 1, 4), binReq(opGet, "a", "", "", 0, 5)},
			want: []string{binRes(opDelete, statusNotFound, "", "", "Not found", 0, 1), binRes(opSet, statusOK, "", "", "", 1, 2),
				binRes(opDelete, statusExists, "", "", "Data exists for key.", 0, 3), binRes(opGet, statusNotFound, "", "", "Not found", 0, 5)}},
		{name: "incr decr",
			in: []string{binReq(opIncr, "n", "", arithExtras(1, 0, 0xffffffff), 0, 1), binReq(opIncr, "n", arithExtras(5, 10, 0), "", 0, 2),
				binReq(opIncr, "n", arithExtras(5, 10, 0), "", 0, 3), binReq(opDecr, "n", arithExtras(100, 0, 0), "", 0, 4),
				binReq(opIncrQ, "n", arithExtras(7, 0, 0), "", 0, 5), binReq(opSet, "s", se, "x", 0, 6), binReq(opIncr, "s", arithExtras(1, 0, 0), "", 0, 7)},
			want: []string{binRes(opIncr, statusInvalid, "", "", "Invalid arguments", 0, 1), binRes(opIncr, statusOK, "", "", u64(10), 1, 2),
				binRes(opIncr, statusOK, "", "", u64(15), 2, 3), binRes(opDecr, statusOK, "", "", u64(0), 3, 4), binRes(opSet, statusOK, "", "", "", 5, 6),
				binRes(opIncr, statusNonNumeric, "", "", "Non-numeric server-side value for incr or decr", 0, 7)}},
		{name: "incr without create",
			in:   []string{binReq(opIncr, "n", arithExtras(1, 0, 0xffffffff), "", 0, 1)},
			want: []string{binRes(opIncr, statusNotFound, "", "", "Not found", 0, 1)}},
		{name: "quiet commands answer errors only",
			in: []string{binReq(opSetQ, "a", se, "x", 0, 1), binReq(opAddQ, "a", se, "y", 0, 2), binReq(opReplaceQ, "a", se, "z", 0, 3),
				binReq(opGetQ, "a", "", "", 0, 4), binReq(opNoop, "", "", "", 0, 5)},
			want: []string{binRes(opAddQ, statusExists, "", "", "Data exists for key.", 0, 2),
				binRes(opGetQ, statusOK, "", noFlags, "z", 2, 4), binRes(opNoop, statusOK, "", "", "", 0, 5)}},
		{name: "touch gat",
			in: []string{binReq(opTouch, "a", noFlags, "", 0, 1), binReq(opSet, "a", se, "x", 0, 2), binReq(opTouch, "a", noFlags, "", 0, 3),
				binReq(opGatK, "a", noFlags, "", 0, 4), binReq(opGat, "a", "\x00\x00\x00\x10", "", 0, 5)},
			want: []string{binRes(opTouch, statusNotFound, "", "", "Not found", 0, 1), binRes(opSet, statusOK, "", "", "", 1, 2),
				binRes(opTouch, statusOK, "", noFlags, "", 1, 3), binRes(opGatK, statusOK, "a", noFlags, "x", 1, 4),
				binRes(opGat, statusOK, "", noFlags, "x", 2, 5)}},
		{name: "refusals keep the connection",
			in: []string{binReq(0x08, "", "", "", 0, 1), binReq(opAppend, "a", noFlags, "x", 0, 2), binReq(opSet, "a", storeExtras(0, 60), "x", 0, 3),
				binReq(opGet, "a", "", "v", 0, 4), binReq(opGet, "", "", "", 0, 5), binReq(opStat, "items", "", "", 0, 6), binReq(opGet, "a b", "", "", 0, 7),
				binReq(opVersion, "", "", "", 0, 8)},
			want: []string{binRes(0x08, statusUnknown, "", "", "Unknown command", 0, 1), binRes(opAppend, statusInvalid, "", "", "Invalid arguments", 0, 2),
				binRes(opSet, statusOK, "", "", "", 1, 3), binRes(opGet, statusInvalid, "", "", "Invalid arguments", 0, 4),
				binRes(opGet, statusInvalid, "", "", "Invalid arguments", 0, 5), binRes(opStat, statusUnsupported, "", "", errBinGroup.msg, 0, 6),
				binRes(opGet, statusInvalid, "", "", "bad key: key contains a control character", 0, 7),
				binRes(opVersion, statusOK, "", "", strings.TrimSuffix(strings.TrimPrefix(versionReply, "VERSION "), "\r\n"), 0, 8)}},
		{name: "client flags",
			in: []string{binReq(opSet, "a", storeExtras(0xdeadbeef, 0), "x", 0, 1), binReq(opGet, "a", "", "", 0, 2),
				binReq(opAppend, "a", "", "y", 0, 3), binReq(opGetK, "a", "", "", 0, 4), binReq(opTouch, "a", noFlags, "", 0, 5)},
			want: []string{binRes(opSet, statusOK, "", "", "", 1, 1), binRes(opGet, statusOK, "", "\xde\xad\xbe\xef", "x", 1, 2),
				binRes(opAppend, statusOK, "", "", "", 2, 3), binRes(opGetK, statusOK, "a", "\xde\xad\xbe\xef", "xy", 2, 4),
				binRes(opTouch, statusOK, "", "\xde\xad\xbe\xef", "", 2, 5)}},
		{name: "a value is never parsed as text",
			in:   []string{binReq(opSet, "a", se, "x\r\nset victim 0 0 1\r\ny\r\n", 0, 1), binReq(opGet, "victim", "", "", 0, 2)},
			want: []string{binRes(opSet, statusOK, "", "", "", 1, 1), binRes(opGet, statusNotFound, "", "", "Not found", 0, 2)}},
		{name: "text and binary on one connection",
			in:   []string{"set a 0 0 1\r\nx\r\n", binReq(opGet, "a", "", "", 0, 1), "get a\r\n"},
			want: []string{"STORED\r\n", binRes(opGet, statusOK, "", noFlags, "x", 1, 1), "VALUE a 0 1\r\nx\r\nEND\r\n"}},
		{name: "too large skipped", cfg: Config{MaxValueBytes: 10, MaxSwallowBytes: 1000},
			in:   []string{binReq(opSet, "a", se, strings.Repeat("x", 11), 0, 1), binReq(opSet, "a", se, strings.Repeat("x", 290), 0, 1), binReq(opNoop, "", "", "", 0, 2)},
			want: []string{binRes(opSet, statusTooLarge, "", "", "Too large.", 0, 1), binRes(opSet, statusTooLarge, "", "", "Too large.", 0, 1), binRes(opNoop, statusOK, "", "", "", 0, 2)}},
		{name: "too large to skip closes", cfg: smallConfig(),
			in:   []string{binReq(opSet, "a", se, strings.Repeat("x", 1000), 0, 1), binReq(opNoop, "", "", "", 0, 2)},
			want: []string{binRes(opSet, statusTooLarge, "", "", "Too large.", 0, 1)}},
		{name: "lengths beyond the body close",
			in:   []string{binReq(opGet, "a", "", "", 0, 1)[:9] + "\x00\x00\x00" + binReq(opGet, "a", "", "", 0, 1)[12:], binReq(opNoop, "", "", "", 0, 2)},
			want: []string{binRes(opGet, statusInvalid, "", "", errBinBody.msg, 0, 1)}},
		{name: "quit", in: []string{binReq(opQuit, "", "", "", 0, 1), binReq(opNoop, "", "", "", 0, 2)},
			want: []string{binRes(opQuit, statusOK, "", "", "", 0, 1)}},
		{name: "quitq", in: []string{binReq(opQuitQ, "", "", "", 0, 1), binReq(opNoop, "", "", "", 0, 2)}},
		{name: "truncated body", in: []string{binReq(opSet, "a", se, "xyz", 0, 1)[:30]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1, 7} {
				s := New(tt.cfg, newFakeBackend(), nil)
				mc := runConn(t, s, strings.Join(tt.in, ""), chunk)
				if got, want := mc.output(), strings.Join(tt.want, ""); got != want {
					t.Fatalf("chunk %d: got\n%q\nwant\n%q", chunk, got, want)
				}
				for _, w := range mc.writes {
					if _, err := checkReplies(w); err != nil {
						t.Fatalf("chunk %d: write %q: %v", chunk, w, err)
					}
				}
			}
		})
	}
}

func TestBinaryStats(t *testing.T) {
	s := New(Config{}, newFakeBackend(), nil)
	mc := runConn(t, s, binReq(opStat, "", "", "", 0, 9), 0)
	out := []byte(mc.output())
	var names []string
	for len(out) >= binHdrLen {
		kl, bl := int(binary.BigEndian.Uint16(out[2:])), int(binary.BigEndian.Uint32(out[8:]))
		if out[0] != binResMagic || out[1] != opStat || binary.BigEndian.Uint32(out[12:]) != 9 {
			t.Fatalf("bad stat reply %q", out[:binHdrLen])
		}
		if bl == 0 {
			out = out[binHdrLen:]
			break
		}
		names = append(names, string(out[binHdrLen:binHdrLen+kl]))
		out = out[binHdrLen+bl:]
	}
	if len(out) != 0 || !strings.Contains(strings.Join(names, " "), "curr_connections") {
		t.Fatalf("stats %q, left %q", names, out)
	}
}

func TestBinaryBackendErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status uint16
		kind   errKind
	}{
		{fmt.Errorf("forward: %w", store.ErrNotRoot), statusUnsupported, kindBackendNotRoot},
		{store.ErrDiskFull, statusInternal, kindBackendDiskFull},
		{store.ErrCorrupt, statusInternal, kindBackendCorrupt},
	} {
		b := newFakeBackend()
		b.setErr = tc.err
		s := New(Config{}, b, nil)
		mc := runConn(t, s, binReq(opSet, "a", storeExtras(0, 0), "x", 0, 1)+binReq(opAdd, "a", storeExtras(0, 0), "x", 0, 2), 0)
		out := []byte(mc.output())
		for i := range 2 {
			if len(out) < binHdrLen || binary.BigEndian.Uint16(out[6:]) != tc.status {
				t.Fatalf("%v: reply %d %q, want status %#x", tc.err, i, out, tc.status)
			}
			bl := int(binary.BigEndian.Uint32(out[8:]))
			if msg := out[binHdrLen : binHdrLen+bl]; bytes.ContainsAny(msg, "\r\n") || len(msg) == 0 {
				t.Fatalf("%v: message %q", tc.err, msg)
			}
			out = out[binHdrLen+bl:]
		}
		if got := counterValue(s.m.errorsByKind[tc.kind]); got != 2 {
			t.Errorf("%v: errors_total{kind=%v} %v, want 2", tc.err, tc.kind, got)
		}
	}
}
