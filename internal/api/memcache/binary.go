package memcache

import (
	"encoding/binary"
)

// This file is the pure half of memcached's binary protocol: a request
// starts with the magic byte 0x80 and a 24-byte header, which this file
// checks against the opcode's shape (extras, key and value lengths)
// without I/O.

const (
	binReqMagic = 0x80
	binResMagic = 0x81
	binHdrLen   = 24
)

// Binary opcodes served here; the quiet variants are told apart by binOps.
const (
	opGet       = 0x00
	opSet       = 0x01
	opAdd       = 0x02
	opReplace   = 0x03
	opDelete    = 0x04
	opIncr      = 0x05
	opDecr      = 0x06
	opQuit      = 0x07
	opGetQ      = 0x09
	opNoop      = 0x0a
	opVersion   = 0x0b
	opGetK      = 0x0c
	opGetKQ     = 0x0d
	opAppend    = 0x0e
	opPrepend   = 0x0f
	opStat      = 0x10
	opSetQ      = 0x11
	opAddQ      = 0x12
	opReplaceQ  = 0x13
	opDeleteQ   = 0x14
	opIncrQ     = 0x15
	opDecrQ     = 0x16
	opQuitQ     = 0x17
	opAppendQ   = 0x19
	opPrependQ  = 0x1a
	opTouch     = 0x1c
	opGat       = 0x1d
	opGatQ      = 0x1e
	opGatK      = 0x23
	opGatKQ     = 0x24
	numBinaryOp = 0x100
)

// Binary response statuses.
const (
	statusOK          = 0x0000
	statusNotFound    = 0x0001
	statusExists      = 0x0002
	statusTooLarge    = 0x0003
	statusInvalid     = 0x0004
	statusNotStored   = 0x0005
	statusNonNumeric  = 0x0006
	statusUnknown     = 0x0081
	statusUnsupported = 0x0083
	statusInternal    = 0x0084
	statusBusy        = 0x0085
)

// binOp describes one opcode: the command it counts as, the lengths its
// request must have, and how its reply behaves.
type binOp struct {
	cmd     command
	extras  int8 // required extras length; -1: any (opcode unknown here)
	key     int8 // 1: required, 0: forbidden, -1: optional
	value   bool // a value may follow
	quiet   bool // success (or, for gets, a miss) is not answered
	withKey bool // the reply carries the key (getk, getkq, gatk, gatkq)
}

var binOps [numBinaryOp]binOp

func init() {
	for i := range binOps {
		binOps[i] = binOp{cmd: cmdInvalid, extras: -1, key: -1}
	}
	set := func(cmd command, extras, key int8, value, quiet, withKey bool, ops ...int) {
		for _, op := range ops {
			binOps[op] = binOp{cmd: cmd, extras: extras, key: key, value: value, quiet: quiet, withKey: withKey}
		}
	}
	set(cmdGet, 0, 1, false, false, false, opGet)
	set(cmdGet, 0, 1, false, true, false, opGetQ)
	set(cmdGet, 0, 1, false, false, true, opGetK)
	set(cmdGet, 0, 1, false, true, true, opGetKQ)
	set(cmdSet, 8, 1, true, false, false, opSet)
	set(cmdSet, 8, 1, true, true, false, opSetQ)
	set(cmdAdd, 8, 1, true, false, false, opAdd)
	set(cmdAdd, 8, 1, true, true, false, opAddQ)
	set(cmdReplace, 8, 1, true, false, false, opReplace)
	set(cmdReplace, 8, 1, true, true, false, opReplaceQ)
	set(cmdAppend, 0, 1, true, false, false, opAppend)
	set(cmdAppend, 0, 1, true, true, false, opAppendQ)
	set(cmdPrepend, 0, 1, true, false, false, opPrepend)
	set(cmdPrepend, 0, 1, true, true, false, opPrependQ)
	set(cmdDelete, 0, 1, false, false, false, opDelete)
	set(cmdDelete, 0, 1, false, true, false, opDeleteQ)
	set(cmdIncr, 20, 1, false, false, false, opIncr)
	set(cmdIncr, 20, 1, false, true, false, opIncrQ)
	set(cmdDecr, 20, 1, false, false, false, opDecr)
	set(cmdDecr, 20, 1, false, true, false, opDecrQ)
	set(cmdQuit, 0, 0, false, false, false, opQuit)
	set(cmdQuit, 0, 0, false, true, false, opQuitQ)
	set(cmdNoop, 0, 0, false, false, false, opNoop)
	set(cmdVersion, 0, 0, false, false, false, opVersion)
	set(cmdStats, 0, -1, false, false, false, opStat)
	set(cmdTouch, 4, 1, false, false, false, opTouch)
	set(cmdGat, 4, 1, false, false, false, opGat)
	set(cmdGat, 4, 1, false, true, false, opGatQ)
	set(cmdGat, 4, 1, false, false, true, opGatK)
	set(cmdGat, 4, 1, false, true, true, opGatKQ)
}

// binHeader is a request header.
type binHeader struct {
	opcode  byte
	keyLen  int
	extLen  int
	bodyLen int
	opaque  uint32
	cas     uint64
}

// binRequest is a request whose body has been read: its slices point into
// the body.
type binRequest struct {
	binHeader
	extras, key, value []byte
	flags              uint32 // set, add, replace: the client flags to store
	exptime            int64  // the expiration extra, as sent (expiresAt)
}

// binError is a binary request refused: its status, metric kind and the
// message sent as the error reply's value. close: the stream cannot be
// followed any more.
type binError struct {
	status uint16
	kind   errKind
	msg    string
	close  bool
}

var (
	errBinMagic   = &binError{status: statusInvalid, kind: kindBadCommand, msg: "Invalid magic", close: true}
	errBinLengths = &binError{status: statusInvalid, kind: kindBadCommand, msg: "Invalid arguments"}
	errBinBody    = &binError{status: statusInvalid, kind: kindBadCommand, msg: "Invalid arguments: lengths exceed the body", close: true}
	errBinUnknown = &binError{status: statusUnknown, kind: kindBadCommand, msg: "Unknown command"}
	errBinTooBig  = &binError{status: statusTooLarge, kind: kindTooLarge, msg: "Too large."}
	errBinGroup   = &binError{status: statusUnsupported, kind: kindUnsupported, msg: "Not supported: stats groups"}
)

// parseBinHeader decodes a request header. The body length is checked
// against maxBody (beyond it: errBinTooBig, the body still to be skipped).
func parseBinHeader(b []byte, maxBody int) (binHeader, *binError) {
	h := binHeader{
		opcode:  b[1],
		keyLen:  int(binary.BigEndian.Uint16(b[2:])),
		extLen:  int(b[4]),
		bodyLen: int(binary.BigEndian.Uint32(b[8:])),
		opaque:  binary.BigEndian.Uint32(b[12:]),
		cas:     binary.BigEndian.Uint64(b[16:]),
	}
	if b[0] != binReqMagic {
		return h, errBinMagic
	}
	if h.keyLen+h.extLen > h.bodyLen {
		return h, errBinBody
	}
	if h.bodyLen > maxBody {
		return h, errBinTooBig
	}
	return h, nil
}

// parseBinBody splits body into extras, key and value and checks them
// against the opcode's shape and the limits.
func parseBinBody(h binHeader, body []byte, lim limits) (binRequest, *binError) {
	r := binRequest{binHeader: h,
		extras: body[:h.extLen],
		key:    body[h.extLen : h.extLen+h.keyLen],
		value:  body[h.extLen+h.keyLen:],
	}
	op := binOps[h.opcode]
	if op.cmd == cmdInvalid {
		return r, errBinUnknown
	}
	if int(op.extras) != h.extLen || (op.key == 1 && h.keyLen == 0) ||
		(op.key == 0 && h.keyLen != 0) || (!op.value && len(r.value) != 0) {
		return r, errBinLengths
	}
	if h.keyLen > 0 {
		if pe := checkKey(r.key, 0); pe != nil {
			return r, &binError{status: statusInvalid, kind: pe.kind, msg: pe.msg[len("CLIENT_ERROR "):]}
		}
	}
	if op.cmd == cmdStats && h.keyLen > 0 {
		return r, errBinGroup
	}
	if len(r.value) > lim.maxValue {
		return r, errBinTooBig
	}
	var exptime []byte
	switch h.extLen {
	case 8: // flags, expiration
		r.flags = binary.BigEndian.Uint32(r.extras)
		exptime = r.extras[4:8]
	case 4: // expiration
		exptime = r.extras
	case 20: // delta, initial, expiration; all ones: do not create
		exptime = r.extras[16:20]
		if binary.BigEndian.Uint32(exptime) == 0xffffffff {
			exptime = nil
		}
	}
	if exptime != nil {
		r.exptime = int64(binary.BigEndian.Uint32(exptime))
	}
	return r, nil
}

// appendBinHeader appends a response header.
func appendBinHeader(out []byte, opcode byte, keyLen, extLen int, status uint16, bodyLen int, opaque uint32, cas uint64) []byte {
	out = append(out, binResMagic, opcode)
	out = binary.BigEndian.AppendUint16(out, uint16(keyLen))
	out = append(out, byte(extLen), 0)
	out = binary.BigEndian.AppendUint16(out, status)
	out = binary.BigEndian.AppendUint32(out, uint32(bodyLen))
	out = binary.BigEndian.AppendUint32(out, opaque)
	return binary.BigEndian.AppendUint64(out, cas)
}
