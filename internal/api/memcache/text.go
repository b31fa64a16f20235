package memcache

import "strconv"

// This file serves the text protocol's one-key commands beyond get: the
// storage commands (set, add, replace, append, prepend, cas), delete,
// incr, decr and touch.

// textOutcome is the text protocol's reply to an outcome.
var textOutcome = [...]string{
	outStored:    "STORED",
	outNotStored: "NOT_STORED",
	outExists:    "EXISTS",
	outNotFound:  "NOT_FOUND",
}

// readData reads the data block of a parsed request that announced one
// (its length and terminator). ok is false when the connection must end;
// data is nil (the reply sent) when the block was malformed.
func (c *conn) readData(req *request) (data []byte, ok bool) {
	n := req.dataLen
	c.key = append(c.key[:0], req.key...)
	block, err := c.readFull(n + 2)
	if err != nil {
		c.readFailed(err)
		return nil, false
	}
	if block[n] != '\r' || block[n+1] != '\n' {
		c.m.errorsByKind[kindBadDataChunk].Inc()
		c.debug("memcache: request refused", "cmd", req.cmd.String(), "reply", errBadDataChunk.msg)
		c.replyLine(errBadDataChunk.msg)
		return nil, true
	}
	// Earlier replies go out before a write that waits for durability.
	if c.flush() != nil {
		return nil, false
	}
	return block[:n], true
}

// storage serves set, add, replace, append, prepend and cas.
func (c *conn) storage(req *request) bool {
	data, ok := c.readData(req)
	if data == nil {
		return ok
	}
	out, _, err := c.storeData(modeOf(req.cmd), c.key, data, Attrs{Flags: req.flags, Expires: expires(req.exptime)}, req.cmd == cmdCas, req.cas)
	if err != nil {
		c.failed(err)
		return true
	}
	c.replyLine(textOutcome[out])
	return true
}

func (c *conn) delete(key []byte) bool {
	if c.flush() != nil {
		return false
	}
	out, err := c.deleteKey(key, false, 0)
	switch {
	case err != nil:
		c.failed(err)
	case out == outStored:
		c.replyLine("DELETED")
	default:
		c.replyLine(textOutcome[out])
	}
	return true
}

// keyCommand serves incr, decr and touch.
func (c *conn) keyCommand(req *request) bool {
	if c.flush() != nil {
		return false
	}
	var v uint64
	var out outcome
	var err error
	if req.cmd == cmdTouch {
		out, _, err = c.touch(req.key, req.exptime)
	} else {
		v, _, out, err = c.incrDecr(req.key, arithOp{incr: req.cmd == cmdIncr, delta: req.delta})
	}
	switch {
	case err != nil:
		c.failed(err)
	case out == outNonNumeric:
		c.failed(errNonNumeric)
	case out != outStored:
		c.replyLine(textOutcome[out])
	case req.cmd == cmdTouch:
		c.replyLine("TOUCHED")
	default:
		if !c.noreply {
			c.out = strconv.AppendUint(c.out, v, 10)
			c.out = append(c.out, "\r\n"...)
		}
	}
	return true
}

// gat serves gat and gats: each key is touched (given the new expiry),
// then returned as get returns it; keys that are absent are left out.
// The values are those the touches left.
func (c *conn) gat(req *request) bool {
	if c.flush() != nil {
		return false
	}
	mark, hits := len(c.out), 0
	for _, key := range req.keys {
		out, idx, err := c.touch(key, req.exptime)
		if err != nil {
			c.out = c.out[:mark]
			c.failed(err)
			return true
		}
		if out != outStored {
			continue
		}
		hits++
		c.out = append(c.out, "VALUE "...)
		c.out = append(c.out, key...)
		c.out = append(c.out, ' ')
		c.out = strconv.AppendUint(c.out, uint64(c.curAttrs.Flags), 10)
		c.out = append(c.out, ' ')
		c.out = strconv.AppendInt(c.out, int64(len(c.cur)), 10)
		if req.cmd == cmdGats {
			c.out = append(c.out, ' ')
			c.out = strconv.AppendUint(c.out, idx, 10)
		}
		c.out = append(c.out, "\r\n"...)
		c.out = append(c.out, c.cur...)
		c.out = append(c.out, "\r\n"...)
		if len(c.out)-mark > c.s.cfg.MaxReplyBytes {
			c.out = c.out[:mark]
			c.m.errorsByKind[kindReplyTooLarge].Inc()
			c.replyLine("SERVER_ERROR reply too large: ask for fewer keys per request")
			return true
		}
	}
	c.s.stats.getHits.Add(uint64(hits))
	c.s.stats.getMisses.Add(uint64(len(req.keys) - hits))
	c.m.getHitsTotal.Add(float64(hits))
	c.m.getMissesTotal.Add(float64(len(req.keys) - hits))
	c.out = append(c.out, "END\r\n"...)
	return true
}

// flushAll serves flush_all.
func (c *conn) flushAll() bool {
	if c.flush() != nil {
		return false
	}
	if _, err := c.s.b.FlushAll(c.s.ctx); err != nil {
		c.failed(err)
		return true
	}
	c.replyLine("OK")
	return true
}
