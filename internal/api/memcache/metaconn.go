package memcache

import (
	"strconv"
	"time"
)

// This file serves the meta commands parsed by meta.go.

// metaCodes are the meta protocol's return codes for each outcome.
var metaCodes = [...]string{
	outStored:    "HD",
	outNotStored: "NS",
	outExists:    "EX",
	outNotFound:  "NF",
}

// meta serves mg, ms, md and ma.
func (c *conn) meta(req *request) bool {
	m := &req.meta
	// The key as sent and the opaque are returned in the reply; reading an
	// ms data block may move the line they point into.
	c.rawKey = append(c.rawKey[:0], m.rawKey...)
	c.opaque = append(c.opaque[:0], m.opaque...)
	switch req.cmd {
	case cmdMetaGet:
		c.metaGet(req.key, m)
		return true
	case cmdMetaSet:
		data, ok := c.readData(req)
		if data == nil {
			return ok
		}
		out, idx, err := c.storeData(m.mode, c.key, data, Attrs{Flags: m.flags, Expires: expires(m.ttl)}, m.hasCas, m.cas)
		c.metaReply(m, out, idx, err, nil)
		return true
	}
	if c.flush() != nil {
		return false
	}
	if req.cmd == cmdMetaDelete {
		out, err := c.deleteKey(req.key, m.hasCas, m.cas)
		c.metaReply(m, out, 0, err, nil)
		return true
	}
	v, idx, out, err := c.incrDecr(req.key, arithOp{incr: m.mode == 'I', delta: m.delta,
		create: m.create, initial: m.initial, expires: expires(m.newTTL), hasCas: m.hasCas, cas: m.cas})
	if err == nil && out == outNonNumeric {
		err = errNonNumeric
	}
	var num []byte
	if m.value {
		num = strconv.AppendUint(c.next[:0], v, 10)
	}
	c.metaReply(m, out, idx, err, num)
	return true
}

// metaGet serves mg.
func (c *conn) metaGet(key []byte, m *metaFlags) {
	value, idx, found, err := c.lookup(key)
	if m.hasTTL && err == nil && found {
		// T: touch, then answer with what the touch left.
		if c.flush() != nil {
			return
		}
		var out outcome
		out, idx, err = c.touch(key, m.ttl)
		value, found = c.cur, out == outStored
	}
	switch {
	case err != nil:
		c.failed(err)
		return
	case !found:
		c.s.stats.getMisses.Add(1)
		c.m.getMissesTotal.Inc()
		if !m.quiet {
			c.out = append(c.out, "EN\r\n"...)
		}
		return
	}
	c.s.stats.getHits.Add(1)
	c.m.getHitsTotal.Inc()
	if m.value {
		c.out = append(c.out, "VA "...)
		c.out = strconv.AppendInt(c.out, int64(len(value)), 10)
	} else {
		c.out = append(c.out, "HD"...)
	}
	c.out = c.metaFlagsOut(c.out, m, idx, c.curAttrs, len(value))
	c.out = append(c.out, "\r\n"...)
	if m.value {
		c.out = append(c.out, value...)
		c.out = append(c.out, "\r\n"...)
	}
}

// metaReply answers ms, md and ma. num, when set, is ma's new value (the v
// flag). q silences success only; errors and other codes are always sent.
func (c *conn) metaReply(m *metaFlags, out outcome, idx uint64, err error, num []byte) {
	if err != nil {
		c.failed(err)
		return
	}
	if out == outStored && m.quiet {
		return
	}
	if out == outStored && num != nil {
		c.out = append(c.out, "VA "...)
		c.out = strconv.AppendInt(c.out, int64(len(num)), 10)
	} else {
		c.out = append(c.out, metaCodes[out]...)
	}
	if out == outStored {
		c.out = c.metaFlagsOut(c.out, m, idx, Attrs{}, -1)
	} else {
		c.out = c.metaFlagsOut(c.out, m, 0, Attrs{}, -1)
	}
	c.out = append(c.out, "\r\n"...)
	if out == outStored && num != nil {
		c.out = append(c.out, num...)
		c.out = append(c.out, "\r\n"...)
	}
}

// metaFlagsOut appends the flags the request asked to have returned, in
// its order: the cas unique (c), client flags (f, mg only), the key (k,
// as sent), the opaque (O), the size (s, when size >= 0), the remaining
// TTL (t, in seconds; -1: never expires) and b when the key is base64.
func (c *conn) metaFlagsOut(out []byte, m *metaFlags, idx uint64, a Attrs, size int) []byte {
	for _, f := range m.ret[:m.nret] {
		switch f {
		case 'b':
			out = append(out, " b"...)
		case 'c':
			out = append(out, " c"...)
			out = strconv.AppendUint(out, idx, 10)
		case 'f':
			out = append(out, " f"...)
			out = strconv.AppendUint(out, uint64(a.Flags), 10)
		case 'k':
			out = append(out, " k"...)
			out = append(out, c.rawKey...)
		case 'O':
			out = append(out, " O"...)
			out = append(out, c.opaque...)
		case 's':
			if size >= 0 {
				out = append(out, " s"...)
				out = strconv.AppendInt(out, int64(size), 10)
			}
		case 't':
			out = append(out, " t"...)
			out = strconv.AppendInt(out, ttl(a, time.Now().UnixNano()), 10)
		}
	}
	return out
}
