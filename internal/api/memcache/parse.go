package memcache

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// This file is the pure half of the protocol: it turns one request line into
// a request, without I/O and without allocating on the success path.

// command is a request's command; it is also the label of requests_total.
// The binary and meta protocols count their requests under the command
// they share with the text protocol (a binary getq is a get, ms is a set).
type command uint8

const (
	cmdInvalid     command = iota // unknown or unparsable
	cmdGet                        // get <key>*
	cmdGets                       // gets <key>*
	cmdGat                        // gat <exptime> <key>*
	cmdGats                       // gats <exptime> <key>*
	cmdSet                        // set <key> <flags> <exptime> <bytes> [noreply]
	cmdAdd                        // add: set if absent
	cmdReplace                    // replace: set if present
	cmdAppend                     // append: add data after the value
	cmdPrepend                    // prepend: add data before the value
	cmdCas                        // cas <key> <flags> <exptime> <bytes> <unique> [noreply]
	cmdDelete                     // delete <key> [0] [noreply]
	cmdIncr                       // incr <key> <delta> [noreply]
	cmdDecr                       // decr <key> <delta> [noreply]
	cmdTouch                      // touch <key> <exptime> [noreply]
	cmdFlushAll                   // flush_all [0] [noreply]
	cmdVersion                    // version
	cmdStats                      // stats
	cmdQuit                       // quit
	cmdNoop                       // mn, and the binary noop
	cmdMetaGet                    // mg <key> <flag>*
	cmdMetaSet                    // ms <key> <datalen> <flag>*
	cmdMetaDelete                 // md <key> <flag>*
	cmdMetaArith                  // ma <key> <flag>*
	cmdUnsupported                // a memcached command this server does not serve
	numCommands
)

var commandNames = [numCommands]string{
	cmdInvalid:     "invalid",
	cmdGet:         "get",
	cmdGets:        "gets",
	cmdGat:         "gat",
	cmdGats:        "gats",
	cmdSet:         "set",
	cmdAdd:         "add",
	cmdReplace:     "replace",
	cmdAppend:      "append",
	cmdPrepend:     "prepend",
	cmdCas:         "cas",
	cmdDelete:      "delete",
	cmdIncr:        "incr",
	cmdDecr:        "decr",
	cmdTouch:       "touch",
	cmdFlushAll:    "flush_all",
	cmdVersion:     "version",
	cmdStats:       "stats",
	cmdQuit:        "quit",
	cmdNoop:        "noop",
	cmdMetaGet:     "mg",
	cmdMetaSet:     "ms",
	cmdMetaDelete:  "md",
	cmdMetaArith:   "ma",
	cmdUnsupported: "unsupported",
}

func (c command) String() string { return commandNames[c] }

// storageCommands maps the names of the commands that carry a data block.
var storageCommands = map[string]command{
	"set": cmdSet, "add": cmdAdd, "replace": cmdReplace,
	"append": cmdAppend, "prepend": cmdPrepend, "cas": cmdCas,
}

// request is one parsed request line. Its byte slices point into the line.
type request struct {
	cmd  command
	keys [][]byte // get, gets, gat, gats: the keys in request order; backing array reused
	key  []byte   // one-key commands
	// dataLen is the length of the data block that follows the line (the
	// storage commands, ms and the unsupported storage commands), or -1 if
	// none follows or its length is unknown. It is set even when parsing
	// fails, so that the caller can skip the block and stay in step with
	// the client.
	dataLen int
	cas     uint64 // cas: the unique the key must still have
	flags   uint32 // the storage commands: the client flags to store
	// exptime is the storage commands', touch's and gat's expiry time as
	// sent: seconds from now up to 30 days, else a Unix time; 0: never;
	// negative: already expired (expiresAt).
	exptime int64
	delta   uint64 // incr, decr
	// noreply: the client asked for no reply. Once the token is recognised
	// it also silences error replies to the request, as memcached does; a
	// client that reads no reply must not receive one.
	noreply bool
	meta    metaFlags // mg, ms, md, ma
}

// protoError is a request the server refuses. msg is the whole reply line
// without its terminator and never contains a line break.
type protoError struct {
	kind errKind
	msg  string
	// close: the byte stream can no longer be split into requests (unknown
	// data block length, over-long line); reply and close the connection.
	close bool
}

func (e *protoError) Error() string { return e.msg }

// Refusals without variable text, allocated once.
var (
	errLineTooLong  = &protoError{kind: kindLineTooLong, msg: "CLIENT_ERROR line too long", close: true}
	errUnknown      = &protoError{kind: kindBadCommand, msg: "ERROR"}
	errFormat       = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR bad command line format"}
	errFormatClose  = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR bad command line format", close: true}
	errDeleteFormat = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR bad command line format. Usage: delete <key> [noreply]"}
	errNoKeys       = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR get needs at least one key"}
	errDelta        = &protoError{kind: kindBadCommand, msg: "CLIENT_ERROR invalid numeric delta argument"}
	errTooLarge     = &protoError{kind: kindTooLarge, msg: "SERVER_ERROR object too large for cache"}
	errStatsGroup   = &protoError{kind: kindUnsupported, msg: "CLIENT_ERROR stats groups are not supported, use stats without arguments"}
	errBadDataChunk = &protoError{kind: kindBadDataChunk, msg: "CLIENT_ERROR bad data chunk"}
)

// unsupported lists memcached commands that are refused with a CLIENT_ERROR
// naming them rather than with ERROR. dataTok is the index (after the
// command) of the token holding the data block length for commands that
// send one, -1 otherwise.
var unsupported = map[string]struct {
	err     *protoError
	dataTok int
}{}

func init() {
	add := func(dataTok int, names ...string) {
		for _, n := range names {
			unsupported[n] = struct {
				err     *protoError
				dataTok int
			}{&protoError{kind: kindUnsupported, msg: "CLIENT_ERROR " + n + " is not supported"}, dataTok}
		}
	}
	add(-1, "verbosity", "shutdown", "me", "slabs", "lru", "lru_crawler",
		"watch", "cache_memlimit", "misbehave", "debugtime", "extstore")
}

// limits are the Config fields the parser needs.
type limits struct {
	maxKeys  int
	maxValue int
}

// parseRequest parses line, a request line without its terminator, into req.
// On failure req.cmd and req.dataLen are still set when they are known, and
// so is req.noreply once the request asked for it.
func parseRequest(line []byte, lim limits, req *request) *protoError {
	req.cmd = cmdInvalid
	req.keys = req.keys[:0]
	req.key = nil
	req.dataLen = -1
	req.noreply = false
	req.flags, req.exptime = 0, 0
	req.cas, req.delta = 0, 0

	name, rest := nextToken(line)
	if cmd, ok := storageCommands[string(name)]; ok {
		req.cmd = cmd
		return parseStorage(rest, lim, req)
	}
	switch string(name) {
	case "get":
		req.cmd = cmdGet
		return parseKeys(rest, lim, req)
	case "gets":
		req.cmd = cmdGets
		return parseKeys(rest, lim, req)
	case "gat", "gats":
		req.cmd = cmdGat
		if len(name) == 4 {
			req.cmd = cmdGats
		}
		exp, rest := nextToken(rest)
		var e *protoError
		if req.exptime, e = parseExptime(exp); e != nil {
			return e
		}
		return parseKeys(rest, lim, req)
	case "delete":
		req.cmd = cmdDelete
		return parseDelete(rest, req)
	case "incr", "decr":
		req.cmd = cmdIncr
		if name[0] == 'd' {
			req.cmd = cmdDecr
		}
		return parseArith(rest, req)
	case "touch":
		req.cmd = cmdTouch
		return parseTouch(rest, req)
	case "flush_all":
		req.cmd = cmdFlushAll
		return parseFlushAll(rest, req)
	case "version":
		req.cmd = cmdVersion
		return noMoreTokens(rest)
	case "quit":
		req.cmd = cmdQuit
		return noMoreTokens(rest)
	case "stats":
		req.cmd = cmdStats
		if tok, _ := nextToken(rest); len(tok) > 0 {
			return errStatsGroup
		}
		return nil
	case "mn":
		req.cmd = cmdNoop
		return nil
	case "mg", "ms", "md", "ma":
		return parseMeta(name, rest, lim, req)
	}
	u, ok := unsupported[string(name)]
	if !ok {
		return errUnknown
	}
	req.cmd = cmdUnsupported
	req.noreply = lastTokenIs(rest, "noreply")
	if u.dataTok >= 0 {
		var toks [8][]byte
		n := splitTokens(rest, toks[:])
		if n <= u.dataTok {
			return &protoError{kind: u.err.kind, msg: u.err.msg, close: true}
		}
		size, ok := parseUint(toks[u.dataTok], maxValueLimit)
		if !ok {
			return &protoError{kind: u.err.kind, msg: u.err.msg, close: true}
		}
		req.dataLen = int(size)
	}
	return u.err
}

// lastTokenIs reports whether the last token of s is tok.
func lastTokenIs(s []byte, tok string) bool {
	s = bytes.TrimRight(s, " ")
	return bytes.HasSuffix(s, []byte(tok)) && (len(s) == len(tok) || s[len(s)-len(tok)-1] == ' ')
}

// parseExptime parses an exptime token (a signed decimal number of
// seconds).
func parseExptime(tok []byte) (int64, *protoError) {
	exp, ok := parseInt(tok)
	if !ok {
		return 0, errFormat
	}
	return exp, nil
}

// maxRelativeExptime is memcached's bound: an exptime up to 30 days is
// relative to now, a larger one is a Unix time.
const maxRelativeExptime = 30 * 24 * 3600

// expiresAt converts a memcached exptime, received at now (Unix ns), to
// the time from which the key is deleted (Unix ns; 0: never). A negative
// exptime, or a Unix time already past, is due at once.
func expiresAt(exptime, now int64) int64 {
	const second = int64(1e9)
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return max(now, 1)
	case exptime <= maxRelativeExptime:
		return now + exptime*second
	case exptime >= (1<<63-1)/second:
		return 1<<63 - 1
	}
	return exptime * second
}

// parseKeys parses the keys of get and gets.
func parseKeys(rest []byte, lim limits, req *request) *protoError {
	for {
		var key []byte
		key, rest = nextToken(rest)
		if len(key) == 0 {
			break
		}
		if len(req.keys) == lim.maxKeys {
			return &protoError{kind: kindTooManyKeys,
				msg: "CLIENT_ERROR too many keys: at most " + strconv.Itoa(lim.maxKeys) + " per request"}
		}
		if e := checkKey(key, len(req.keys)+1); e != nil {
			return e
		}
		req.keys = append(req.keys, key)
	}
	if len(req.keys) == 0 {
		return errNoKeys
	}
	return nil
}

// parseStorage parses "<key> <flags> <exptime> <bytes> [<unique>]
// [noreply]" (the unique for cas only). The data block length is parsed
// first: without it the stream cannot be followed.
func parseStorage(rest []byte, lim limits, req *request) *protoError {
	var toks [7][]byte
	n := splitTokens(rest, toks[:])
	want := 4 // key flags exptime bytes
	if req.cmd == cmdCas {
		want = 5
	}
	if n < want || n > want+1 {
		return errFormatClose
	}
	size, ok := parseUint(toks[3], maxValueLimit)
	if !ok {
		return errFormatClose
	}
	req.dataLen = int(size)
	req.key = toks[0]
	if n == want+1 {
		if string(toks[want]) != "noreply" {
			return errFormat
		}
		req.noreply = true
	}
	if e := checkKey(toks[0], 0); e != nil {
		return e
	}
	flags, ok := parseUint(toks[1], 1<<32-1)
	if !ok {
		return errFormat
	}
	req.flags = uint32(flags)
	var e *protoError
	if req.exptime, e = parseExptime(toks[2]); e != nil {
		return e
	}
	if req.cmd == cmdCas {
		if req.cas, ok = parseUint(toks[4], 1<<64-1); !ok {
			return errFormat
		}
	}
	if req.dataLen > lim.maxValue {
		return errTooLarge
	}
	return nil
}

// parseKeyArg parses "<key> <arg> [noreply]" (incr, decr, touch): the
// key and noreply into req; it returns arg.
func parseKeyArg(rest []byte, req *request) ([]byte, *protoError) {
	var toks [4][]byte
	n := splitTokens(rest, toks[:])
	if n == 3 && string(toks[2]) == "noreply" {
		req.noreply = true
		n = 2
	}
	if n != 2 {
		return nil, errFormat
	}
	req.key = toks[0]
	if e := checkKey(toks[0], 0); e != nil {
		return nil, e
	}
	return toks[1], nil
}

// parseArith parses "<key> <delta> [noreply]" of incr and decr.
func parseArith(rest []byte, req *request) *protoError {
	arg, e := parseKeyArg(rest, req)
	if e != nil {
		return e
	}
	d, ok := parseUint(arg, 1<<64-1)
	if !ok {
		return errDelta
	}
	req.delta = d
	return nil
}

// errFlushDelay refuses a delayed flush_all: a flush happens as one entry
// of the log, at once.
var errFlushDelay = &protoError{kind: kindUnsupported, msg: "CLIENT_ERROR flush_all with a delay is not supported, use flush_all or flush_all 0"}

// parseFlushAll parses "[delay] [noreply]"; the delay must be 0.
func parseFlushAll(rest []byte, req *request) *protoError {
	var toks [3][]byte
	n := splitTokens(rest, toks[:])
	if n > 0 && string(toks[n-1]) == "noreply" {
		req.noreply = true
		n--
	}
	switch {
	case n == 0:
		return nil
	case n > 1:
		return errFormat
	}
	d, ok := parseInt(toks[0])
	switch {
	case !ok:
		return errFormat
	case d != 0:
		return errFlushDelay
	}
	return nil
}

// parseTouch parses "<key> <exptime> [noreply]".
func parseTouch(rest []byte, req *request) *protoError {
	arg, e := parseKeyArg(rest, req)
	if e != nil {
		return e
	}
	req.exptime, e = parseExptime(arg)
	return e
}

// parseDelete parses "<key> [0] [noreply]"; the 0 is a time argument old
// clients still send.
func parseDelete(rest []byte, req *request) *protoError {
	var toks [4][]byte
	n := splitTokens(rest, toks[:])
	req.noreply = n > 1 && lastTokenIs(rest, "noreply")
	switch {
	case n == 1:
	case n == 2 && string(toks[1]) == "noreply":
		req.noreply = true
	case n == 2 && string(toks[1]) == "0":
	case n == 3 && string(toks[1]) == "0" && string(toks[2]) == "noreply":
		req.noreply = true
	default:
		return errDeleteFormat
	}
	req.key = toks[0]
	return checkKey(toks[0], 0)
}

func noMoreTokens(rest []byte) *protoError {
	if tok, _ := nextToken(rest); len(tok) > 0 {
		return errFormat
	}
	return nil
}

// checkKey applies memcached's key rules: 1 to 250 bytes, no control
// characters and no spaces. n > 0 numbers the key in a multi-key request.
func checkKey(key []byte, n int) *protoError {
	var why string
	switch {
	case len(key) == 0:
		why = "is empty"
	case len(key) > maxKeyLen:
		why = "is longer than 250 bytes"
	case hasControl(key):
		why = "contains a control character"
	default:
		return nil
	}
	if n > 0 {
		return &protoError{kind: kindBadKey, msg: "CLIENT_ERROR bad key: key " + strconv.Itoa(n) + " " + why}
	}
	return &protoError{kind: kindBadKey, msg: "CLIENT_ERROR bad key: key " + why}
}

// hasControl reports whether b holds a byte <= ' ' or 0x7f. It tests eight
// bytes at a time: keys are checked on every read.
func hasControl(b []byte) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		y := x ^ (0x7f * ones)
		// (v - n*ones) &^ v & highs is non-zero iff some byte of v is
		// below n (n <= 0x80): bytes below 0x21, or x bytes equal to 0x7f.
		if ((x-0x21*ones)&^x|(y-ones)&^y)&highs != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c <= ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// nextToken returns the first space-separated token of s and what follows
// it. Runs of spaces separate like one, as in memcached. tok is empty when s
// holds no more tokens.
func nextToken(s []byte) (tok, rest []byte) {
	i := 0
	for i < len(s) && s[i] == ' ' {
		i++
	}
	s = s[i:]
	if j := bytes.IndexByte(s, ' '); j >= 0 {
		return s[:j], s[j:]
	}
	return s, nil
}

// splitTokens stores the tokens of s in toks and returns how many there are;
// a result above len(toks)-1 means "too many" (only len(toks)-1 are stored
// reliably, the last slot is scratch).
func splitTokens(s []byte, toks [][]byte) int {
	n := 0
	for n < len(toks) {
		var tok []byte
		tok, s = nextToken(s)
		if len(tok) == 0 {
			break
		}
		toks[n] = tok
		n++
	}
	return n
}

// parseUint parses a decimal number of at most limit, digits only.
func parseUint(b []byte, limit uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if d > limit || v > (limit-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseInt parses a decimal number with an optional minus sign.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	v, ok := parseUint(b, 1<<63-1)
	if neg {
		return -int64(v), ok
	}
	return int64(v), ok
}
