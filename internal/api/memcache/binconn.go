package memcache

import (
	"encoding/binary"
	"errors"
	"time"
)

// This file serves the binary protocol parsed by binary.go. A request is
// recognised by its first byte, 0x80, which no text command starts with; its
// body is read by its announced length and never parsed as text.

// binary serves one binary request; it reports whether to keep the
// connection open.
func (c *conn) binary() bool {
	maxBody := c.s.cfg.MaxValueBytes + maxKeyLen + 32
	hdr, err := c.readFull(binHdrLen)
	if err != nil {
		c.readFailed(err)
		return false
	}
	h, berr := parseBinHeader(hdr, maxBody)
	c.req.cmd = binOps[h.opcode].cmd
	defer c.countBinary(c.req.cmd)
	if berr != nil {
		c.binRefuse(h, berr)
		if berr.close || h.bodyLen > c.s.cfg.MaxSwallowBytes {
			c.linger = true
			return false
		}
		if err := c.discard(h.bodyLen); err != nil {
			c.readFailed(err)
			return false
		}
		return true
	}
	body, err := c.readFull(h.bodyLen)
	if err != nil {
		c.readFailed(err)
		return false
	}
	r, berr := parseBinBody(h, body, c.s.lim)
	if berr != nil {
		c.binRefuse(h, berr)
		return true
	}
	op := binOps[h.opcode]
	switch op.cmd {
	case cmdGet, cmdGat:
		c.binGet(&r, op)
	case cmdSet, cmdAdd, cmdReplace, cmdAppend, cmdPrepend:
		if c.flush() != nil {
			return false
		}
		out, idx, err := c.storeData(modeOf(op.cmd), r.key, r.value, Attrs{Flags: r.flags, Expires: expires(r.exptime)}, op.cmd != cmdAdd && r.cas != 0, r.cas)
		c.binOutcome(&r, op, out, idx, err, nil)
	case cmdDelete:
		if c.flush() != nil {
			return false
		}
		out, err := c.deleteKey(r.key, r.cas != 0, r.cas)
		c.binOutcome(&r, op, out, 0, err, nil)
	case cmdIncr, cmdDecr:
		if c.flush() != nil {
			return false
		}
		v, idx, out, err := c.incrDecr(r.key, arithOp{
			incr:    op.cmd == cmdIncr,
			delta:   binary.BigEndian.Uint64(r.extras),
			initial: binary.BigEndian.Uint64(r.extras[8:]),
			create:  binary.BigEndian.Uint32(r.extras[16:]) != 0xffffffff,
			hasCas:  r.cas != 0, cas: r.cas,
			expires: expires(r.exptime),
		})
		c.binOutcome(&r, op, out, idx, err, binary.BigEndian.AppendUint64(c.next[:0], v))
	case cmdTouch:
		out, idx, err := c.touch(r.key, r.exptime)
		c.binOutcome(&r, op, out, idx, err, nil)
	case cmdNoop:
		c.out = appendBinHeader(c.out, h.opcode, 0, 0, statusOK, 0, h.opaque, 0)
	case cmdVersion:
		v := c.s.versionLine[len("VERSION ") : len(c.s.versionLine)-2]
		c.out = appendBinHeader(c.out, h.opcode, 0, 0, statusOK, len(v), h.opaque, 0)
		c.out = append(c.out, v...)
	case cmdStats:
		c.binStats(&r)
	case cmdQuit:
		if !op.quiet {
			c.out = appendBinHeader(c.out, h.opcode, 0, 0, statusOK, 0, h.opaque, 0)
		}
		return false
	}
	return true
}

func (c *conn) countBinary(cmd command) {
	c.m.requestsByCmd[cmd].Inc()
	c.m.secondsByCmd[cmd].Observe(time.Since(c.reqStart).Seconds())
}

// binGet serves get, getq, getk, getkq and the gat variants.
func (c *conn) binGet(r *binRequest, op binOp) {
	value, idx, found, err := c.lookup(r.key)
	if op.cmd == cmdGat && err == nil && found {
		if c.flush() != nil {
			return
		}
		var out outcome
		out, idx, err = c.touch(r.key, r.exptime)
		value, found = c.cur, out == outStored
	}
	switch {
	case err != nil:
		c.binFailed(r, err)
		return
	case !found:
		c.s.stats.getMisses.Add(1)
		c.m.getMissesTotal.Inc()
		if op.quiet {
			return
		}
		if op.withKey {
			c.out = appendBinHeader(c.out, r.opcode, len(r.key), 0, statusNotFound, len(r.key), r.opaque, 0)
			c.out = append(c.out, r.key...)
		} else {
			c.out = appendBinHeader(c.out, r.opcode, 0, 0, statusNotFound, len("Not found"), r.opaque, 0)
			c.out = append(c.out, "Not found"...)
		}
		return
	}
	c.s.stats.getHits.Add(1)
	c.m.getHitsTotal.Inc()
	keyLen := 0
	if op.withKey {
		keyLen = len(r.key)
	}
	c.out = appendBinHeader(c.out, r.opcode, keyLen, 4, statusOK, 4+keyLen+len(value), r.opaque, idx)
	c.out = binary.BigEndian.AppendUint32(c.out, c.curAttrs.Flags)
	if op.withKey {
		c.out = append(c.out, r.key...)
	}
	c.out = append(c.out, value...)
}

// binOutcome answers a storage command, delete, incr, decr or touch. num
// is incr's and decr's value (8 bytes).
func (c *conn) binOutcome(r *binRequest, op binOp, out outcome, idx uint64, err error, num []byte) {
	if err != nil {
		c.binFailed(r, err)
		return
	}
	var status uint16
	var msg string
	switch out {
	case outStored:
		if op.quiet {
			return
		}
		if op.cmd == cmdTouch { // as memcached: the flags and the cas unique
			c.out = appendBinHeader(c.out, r.opcode, 0, 4, statusOK, 4, r.opaque, idx)
			c.out = binary.BigEndian.AppendUint32(c.out, c.curAttrs.Flags)
			return
		}
		if op.cmd == cmdIncr || op.cmd == cmdDecr {
			c.out = appendBinHeader(c.out, r.opcode, 0, 0, statusOK, len(num), r.opaque, idx)
			c.out = append(c.out, num...)
			return
		}
		c.out = appendBinHeader(c.out, r.opcode, 0, 0, statusOK, 0, r.opaque, idx)
		return
	case outNotStored:
		// As memcached answers in this protocol: add of a present key is
		// "exists", replace of a missing one "not found".
		switch op.cmd {
		case cmdAdd:
			status, msg = statusExists, "Data exists for key."
		case cmdReplace:
			status, msg = statusNotFound, "Not found"
		default:
			status, msg = statusNotStored, "Not stored."
		}
	case outExists:
		status, msg = statusExists, "Data exists for key."
	case outNotFound:
		status, msg = statusNotFound, "Not found"
	case outNonNumeric:
		c.m.errorsByKind[kindNonNumeric].Inc()
		status, msg = statusNonNumeric, "Non-numeric server-side value for incr or decr"
	}
	c.out = appendBinHeader(c.out, r.opcode, 0, 0, status, len(msg), r.opaque, 0)
	c.out = append(c.out, msg...)
}

// binStats answers stat: one reply per statistic, then an empty one.
func (c *conn) binStats(r *binRequest) {
	for _, kv := range c.s.statPairs() {
		c.out = appendBinHeader(c.out, r.opcode, len(kv[0]), 0, statusOK, len(kv[0])+len(kv[1]), r.opaque, 0)
		c.out = append(c.out, kv[0]...)
		c.out = append(c.out, kv[1]...)
	}
	c.out = appendBinHeader(c.out, r.opcode, 0, 0, statusOK, 0, r.opaque, 0)
}

// binRefuse answers a refused request (quiet or not: errors are always
// sent) and counts it.
func (c *conn) binRefuse(h binHeader, e *binError) {
	c.m.errorsByKind[e.kind].Inc()
	c.debug("memcache: binary request refused", "opcode", h.opcode, "reply", e.msg)
	c.out = appendBinHeader(c.out, h.opcode, 0, 0, e.status, len(e.msg), h.opaque, 0)
	c.out = append(c.out, e.msg...)
}

// binFailed answers an operation error with the status closest to it.
func (c *conn) binFailed(r *binRequest, err error) {
	var pe *protoError
	if errors.As(err, &pe) {
		status := uint16(statusInternal)
		switch pe.kind {
		case kindTooLarge:
			status = statusTooLarge
		case kindContended:
			status = statusBusy
		}
		c.binRefuse(r.binHeader, &binError{status: status, kind: pe.kind, msg: pe.msg})
		return
	}
	kind, line := backendFailure(err)
	if kind == kindBackendCorrupt {
		c.s.log.Error("memcache: backend error", "cmd", c.req.cmd.String(), "remote", remoteAddr(c.nc), "err", err)
	}
	status := uint16(statusInternal)
	switch kind {
	case kindBackendNotRoot:
		status = statusUnsupported
	case kindBackendTooLarge:
		status = statusTooLarge
	case kindBackendInvalid:
		status = statusInvalid
	}
	c.binRefuse(r.binHeader, &binError{status: status, kind: kind, msg: line})
}
