package memcache

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzMeta feeds arbitrary meta request lines to the parser. Seeds are in
// testdata/fuzz/FuzzMeta.
func FuzzMeta(f *testing.F) {
	for _, s := range []string{"mg k v c f k s t Oop q", "ms k 5 MA C7 F0 T0 q", "md k C3 q k", "ma k N0 J5 D2 MD v t c",
		"mg AAE= b k v", "ms k", "mg k Ozzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "ma k Dx",
		"ms k 1 F4294967295 T-1", "mg k T2592001 f t v", "ma k N60 J1 t", "ms k 1 F4294967296"} {
		f.Add([]byte(s))
	}
	lim := limits{maxKeys: 8, maxValue: 100}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return
		}
		var req request
		perr := parseRequest(line, lim, &req)
		name, _ := nextToken(line)
		isMeta := map[string]bool{"mg": true, "ms": true, "md": true, "ma": true}[string(name)]
		if perr != nil {
			if perr.msg == "" || strings.ContainsAny(perr.msg, "\r\n") ||
				!strings.HasPrefix(perr.msg, "CLIENT_ERROR ") && !strings.HasPrefix(perr.msg, "SERVER_ERROR ") && perr.msg != "ERROR" {
				t.Fatalf("%q: bad refusal %q", line, perr.msg)
			}
			if isMeta && string(name) != "ms" && (perr.close || req.dataLen != -1) {
				t.Fatalf("%q: a meta command without data closes or skips: %+v", line, perr)
			}
			return
		}
		if !isMeta {
			return
		}
		m := &req.meta
		if len(req.key) == 0 || len(req.key) > maxKeyLen {
			t.Fatalf("%q: key %q", line, req.key)
		}
		if m.base64 {
			dec, err := base64.StdEncoding.DecodeString(string(m.rawKey))
			if err != nil || !bytes.Equal(dec, req.key) {
				t.Fatalf("%q: base64 key %q decoded as %q", line, m.rawKey, req.key)
			}
		} else if !bytes.Equal(req.key, m.rawKey) || hasControl(req.key) {
			t.Fatalf("%q: key %q", line, req.key)
		}
		if len(m.opaque) > maxOpaqueLen || m.nret > len(m.ret) {
			t.Fatalf("%q: flags %+v", line, m)
		}
		if (req.cmd == cmdMetaSet) != (req.dataLen >= 0) || req.dataLen > lim.maxValue {
			t.Fatalf("%q: data length %d", line, req.dataLen)
		}
		switch req.cmd {
		case cmdMetaSet:
			if !strings.ContainsRune("SEAPR", rune(m.mode)) {
				t.Fatalf("%q: mode %q", line, m.mode)
			}
		case cmdMetaArith:
			if m.mode != 'I' && m.mode != 'D' {
				t.Fatalf("%q: mode %q", line, m.mode)
			}
		}
	})
}

// FuzzBinary feeds arbitrary bytes to the binary request parser. Seeds are
// in testdata/fuzz/FuzzBinary.
func FuzzBinary(f *testing.F) {
	f.Add([]byte(binReq(opSet, "k", storeExtras(0, 0), "value", 7, 1)))
	f.Add([]byte(binReq(opSet, "k", storeExtras(0xffffffff, 0xffffffff), "v", 0, 5)))
	f.Add([]byte(binReq(opGat, "k", "\x00\x00\x00\x10", "", 0, 6)))
	f.Add([]byte(binReq(opIncr, "n", arithExtras(1, 5, 0xffffffff), "", 0, 2)))
	f.Add([]byte(binReq(opGetKQ, "k", "", "", 0, 3)))
	f.Add([]byte(binReq(0x08, "", "", "", 0, 4)))
	lim := limits{maxKeys: 8, maxValue: 100}
	const maxBody = 100 + maxKeyLen + 32
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < binHdrLen {
			return
		}
		h, berr := parseBinHeader(in[:binHdrLen], maxBody)
		if berr != nil {
			if in[0] == binReqMagic && h.keyLen+h.extLen <= h.bodyLen && h.bodyLen <= maxBody {
				t.Fatalf("%x: header refused %q", in[:binHdrLen], berr.msg)
			}
			if berr == errBinTooBig && berr.close {
				t.Fatal("a body too large must be skippable")
			}
			return
		}
		body := in[binHdrLen:]
		if len(body) < h.bodyLen {
			return
		}
		body = body[:h.bodyLen]
		r, berr := parseBinBody(h, body, lim)
		if len(r.extras)+len(r.key)+len(r.value) != h.bodyLen {
			t.Fatalf("body split %d+%d+%d of %d", len(r.extras), len(r.key), len(r.value), h.bodyLen)
		}
		if berr != nil {
			if berr.msg == "" || berr.status == statusOK || berr.close {
				t.Fatalf("bad refusal %+v", berr)
			}
			return
		}
		op := binOps[h.opcode]
		if op.cmd == cmdInvalid || int(op.extras) != len(r.extras) || len(r.value) > lim.maxValue {
			t.Fatalf("accepted %+v as %+v", h, op)
		}
		if len(r.key) > 0 && checkKey(r.key, 0) != nil {
			t.Fatalf("accepted bad key %q", r.key)
		}
		if op.key == 1 && len(r.key) == 0 || !op.value && len(r.value) > 0 {
			t.Fatalf("accepted %+v for %+v", r, op)
		}
		if out := appendBinHeader(nil, h.opcode, len(r.key), len(r.extras), statusOK, h.bodyLen, h.opaque, h.cas); len(out) != binHdrLen || out[0] != binResMagic {
			t.Fatalf("response header %x", out)
		}
	})
}
