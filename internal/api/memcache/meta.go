package memcache

import (
	"encoding/base64"
)

// This file parses the meta commands (mg, ms, md, ma; mn needs no
// parsing), memcached 1.6's flexible protocol. Like parse.go it is pure:
// a request line in, a request out.

// metaFlags are the flags of one meta request.
type metaFlags struct {
	// ret lists, in request order, the flags whose value the reply
	// returns: b c f k O s t (and v for ma, which changes the reply).
	ret  [12]byte
	nret int

	opaque  []byte // O: copied back in the reply
	rawKey  []byte // the key as sent (base64 when b is set)
	base64  bool   // b: the key is base64; it was decoded into keyBuf
	keyBuf  [maxKeyLen]byte
	quiet   bool   // q: no reply on success (and on a miss, for mg)
	value   bool   // v: return the value (mg, ma)
	hasCas  bool   // C: compare the key's cas unique
	cas     uint64 // C's token
	flags   uint32 // F (ms): the client flags to store
	ttl     int64  // T: the TTL to store (ms), or to touch (mg)
	hasTTL  bool   // T was given
	newTTL  int64  // N (ma): the TTL of a created key
	mode    byte   // M: ms E A P R S; ma I D (normalised to upper case, + and - mapped)
	delta   uint64 // ma D, default 1
	initial uint64 // ma J, default 0
	create  bool   // ma N: create the key on a miss
}

// maxOpaqueLen is memcached's limit on an O token.
const maxOpaqueLen = 32

var (
	errMetaFlag   = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR invalid flag"}
	errMetaKey    = &protoError{kind: kindBadKey, msg: "CLIENT_ERROR error decoding key"}
	errMetaMode   = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR invalid mode for ms"}
	errMetaArith  = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR invalid mode for ma"}
	errMetaNumber = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR bad token in command line format"}
	errMetaLRU    = &protoError{kind: kindUnsupported, msg: "CLIENT_ERROR flags h and l are not supported: no access times are kept"}
	errMetaStale  = &protoError{kind: kindUnsupported, msg: "CLIENT_ERROR flags I, N (mg), R, E and x are not supported"}
)

// parseMeta parses "mg|md|ma <key> <flag>*" and "ms <key> <datalen> <flag>*".
func parseMeta(name, rest []byte, lim limits, req *request) *protoError {
	m := &req.meta
	*m = metaFlags{delta: 1}
	switch string(name) {
	case "mg":
		req.cmd = cmdMetaGet
	case "ms":
		req.cmd = cmdMetaSet
		m.mode = 'S'
	case "md":
		req.cmd = cmdMetaDelete
	case "ma":
		req.cmd = cmdMetaArith
		m.mode = 'I'
	}
	key, rest := nextToken(rest)
	if req.cmd == cmdMetaSet {
		var size []byte
		size, rest = nextToken(rest)
		n, ok := parseUint(size, maxValueLimit)
		if !ok {
			return errFormatClose
		}
		req.dataLen = int(n)
	}
	// q first: it silences nothing but success, yet is known before any
	// refusal is sent, as the other flags are.
	var toks [24][]byte
	n := splitTokens(rest, toks[:])
	if n == len(toks) {
		return errMetaFlag
	}
	for _, t := range toks[:n] {
		if t[0] == 'q' {
			m.quiet = true
		}
	}
	if len(key) == 0 {
		return errFormat
	}
	m.rawKey = key
	for _, t := range toks[:n] {
		if e := m.parseFlag(req.cmd, t); e != nil {
			return e
		}
	}
	if m.base64 {
		k, err := base64.StdEncoding.AppendDecode(m.keyBuf[:0], key)
		if err != nil || len(k) == 0 || len(k) > maxKeyLen {
			return errMetaKey
		}
		req.key = k
	} else {
		if e := checkKey(key, 0); e != nil {
			return e
		}
		req.key = key
	}
	if req.dataLen > lim.maxValue {
		return errTooLarge
	}
	return nil
}

func hasFlag(toks [][]byte, f byte) bool {
	for _, t := range toks {
		if t[0] == f {
			return true
		}
	}
	return false
}

// parseFlag applies one flag token of a cmd request.
func (m *metaFlags) parseFlag(cmd command, t []byte) *protoError {
	f, arg := t[0], t[1:]
	num := func() (uint64, *protoError) {
		v, ok := parseUint(arg, 1<<64-1)
		if !ok {
			return 0, errMetaNumber
		}
		return v, nil
	}
	retFlag := func() *protoError {
		if len(arg) != 0 {
			return errMetaFlag
		}
		if m.nret < len(m.ret) {
			m.ret[m.nret] = f
			m.nret++
		}
		return nil
	}
	var err *protoError
	switch {
	case f == 'P' || f == 'L': // proxy hints, ignored as memcached does
	case f == 'q':
	case f == 'b':
		m.base64 = true
		return retFlag()
	case f == 'O':
		if len(arg) > maxOpaqueLen {
			return errMetaFlag
		}
		m.opaque = arg
		arg = nil
		return retFlag()
	case f == 'k':
		return retFlag()
	case f == 'T': // md: no effect (the key is deleted)
		m.hasTTL = true
		m.ttl, err = parseExptime(arg)
	case f == 'c' && cmd != cmdMetaDelete:
		return retFlag()
	case f == 'C' && cmd != cmdMetaGet:
		m.hasCas = true
		m.cas, err = num()
	case cmd == cmdMetaGet && (f == 'f' || f == 's' || f == 't' || f == 'v'):
		if f == 'v' {
			m.value = true
			return nil
		}
		return retFlag()
	case cmd == cmdMetaGet && f == 'u': // no LRU to leave alone
	case cmd == cmdMetaGet && (f == 'h' || f == 'l'):
		return errMetaLRU
	case cmd == cmdMetaSet && f == 'F':
		v, ok := parseUint(arg, 1<<32-1)
		if !ok {
			return errMetaNumber
		}
		m.flags = uint32(v)
	case cmd == cmdMetaSet && f == 'M':
		if len(arg) != 1 {
			return errMetaMode
		}
		switch c := arg[0] &^ 0x20; c { // upper case
		case 'E', 'A', 'P', 'R', 'S':
			m.mode = c
		default:
			return errMetaMode
		}
	case cmd == cmdMetaArith && (f == 't' || f == 'v'):
		if f == 'v' {
			m.value = true
			return nil
		}
		return retFlag()
	case cmd == cmdMetaArith && f == 'N':
		m.create = true
		m.newTTL, err = parseExptime(arg)
	case cmd == cmdMetaArith && f == 'J':
		m.initial, err = num()
	case cmd == cmdMetaArith && f == 'D':
		m.delta, err = num()
	case cmd == cmdMetaArith && f == 'M':
		if len(arg) != 1 {
			return errMetaArith
		}
		switch arg[0] {
		case 'I', 'i', '+':
			m.mode = 'I'
		case 'D', 'd', '-':
			m.mode = 'D'
		default:
			return errMetaArith
		}
	case f == 'I' || f == 'N' || f == 'R' || f == 'E' || f == 'x':
		return errMetaStale
	default:
		return errMetaFlag
	}
	return err
}
