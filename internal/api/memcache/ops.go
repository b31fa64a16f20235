package memcache

import (
	"errors"
	"strconv"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// This file holds the operations the three protocols (text, meta, binary)
// share: every conditional write is one Backend.WriteIf, an entry that the
// log applies only if the key's index is still the one the command saw, so
// that add, replace, cas, append, prepend, incr and decr are each one
// atomic, durable change. A command whose key changed between its read and
// its write reads again and retries, at most maxAttempts times.

// outcome is the result of a storage operation that did not fail.
type outcome uint8

const (
	outStored     outcome = iota // STORED, DELETED, TOUCHED; HD
	outNotStored                 // NOT_STORED; NS
	outExists                    // EXISTS: the cas unique did not match; EX
	outNotFound                  // NOT_FOUND; NF
	outNonNumeric                // incr or decr of a value that is not a number
)

// maxAttempts bounds how often a read-modify-write command retries when
// its key changed between its read and its write.
const maxAttempts = 16

// Operation refusals that are not the backend's.
var (
	errContended = &protoError{kind: kindContended,
		msg: "SERVER_ERROR the key kept changing while the command ran: try again"}
	errNonNumeric = &protoError{kind: kindNonNumeric,
		msg: "CLIENT_ERROR cannot increment or decrement non-numeric value"}
)

// Storage modes, named as the meta protocol's M flag names them.
const (
	modeSet     = 'S'
	modeAdd     = 'E'
	modeReplace = 'R'
	modeAppend  = 'A'
	modePrepend = 'P'
)

// modeOf maps a text storage command to its mode.
func modeOf(cmd command) byte {
	switch cmd {
	case cmdAdd:
		return modeAdd
	case cmdReplace:
		return modeReplace
	case cmdAppend:
		return modeAppend
	case cmdPrepend:
		return modePrepend
	}
	return modeSet
}

// combine returns the value a replace, append or prepend of data writes
// over cur (appended to buf[:0]).
func combine(buf []byte, mode byte, cur, data []byte) []byte {
	switch mode {
	case modeAppend:
		return append(append(buf[:0], cur...), data...)
	case modePrepend:
		return append(append(buf[:0], data...), cur...)
	}
	return append(buf[:0], data...)
}

// arith applies incr (or decr) of delta to the decimal number cur, as
// memcached does: 64-bit unsigned, incr wraps around, decr stops at 0.
// Trailing spaces (memcached pads a shrunk number with them) are allowed.
// ok is false when cur is not such a number.
func arith(cur []byte, incr bool, delta uint64) (uint64, bool) {
	for len(cur) > 0 && cur[len(cur)-1] == ' ' {
		cur = cur[:len(cur)-1]
	}
	v, ok := parseUint(cur, 1<<64-1)
	if !ok {
		return 0, false
	}
	if incr {
		return v + delta, true
	}
	if delta > v {
		return 0, true
	}
	return v - delta, true
}

// lookup reads one key. The value is copied into c.cur (valid until the
// next lookup), its attributes into c.curAttrs.
func (c *conn) lookup(key []byte) (value []byte, index uint64, found bool, err error) {
	c.oneKey[0] = key
	c.curFound = false
	_, err = c.s.b.Get(c.oneKey[:], c.foundCur)
	c.oneKey[0] = nil
	if err != nil || !c.curFound {
		return nil, 0, false, err
	}
	return c.cur, c.curIndex, true, nil
}

// lookupFound is lookup's found callback, bound once to c.foundCur so that
// a lookup does not allocate.
func (c *conn) lookupFound(_, v []byte, idx uint64, a Attrs) {
	c.cur = append(c.cur[:0], v...)
	c.curIndex, c.curAttrs, c.curFound = idx, a, true
}

// expires is the expiry of a key stored now with exptime (expiresAt).
func expires(exptime int64) int64 { return expiresAt(exptime, time.Now().UnixNano()) }

// existence answers a conditional command whose condition did not hold:
// EXISTS if the key is there, NOT_FOUND if not.
func (c *conn) existence(key []byte) (outcome, error) {
	_, _, found, err := c.lookup(key)
	switch {
	case err != nil:
		return 0, err
	case found:
		return outExists, nil
	default:
		return outNotFound, nil
	}
}

// storeData runs a storage command: mode is one of the mode constants;
// with hasCas the key must still have the unique cas. set, add, replace
// and cas store a (client flags and expiry); append and prepend keep the
// key's, as memcached does. It returns the index of the write when stored.
func (c *conn) storeData(mode byte, key, data []byte, a Attrs, hasCas bool, cas uint64) (outcome, uint64, error) {
	c.s.stats.cmdSet.Add(1)
	if mode != modeSet && mode != modeAdd {
		if err := c.s.b.Writable(); err != nil {
			return 0, 0, err
		}
	}
	switch {
	case mode == modeSet && !hasCas:
		idx, err := c.s.b.Set(c.s.ctx, key, data, a)
		return outStored, idx, err
	case mode == modeSet || mode == modeAdd:
		// cas unique 0 is never a key's: a cas with it cannot succeed.
		if mode == modeSet && cas == 0 {
			if err := c.s.b.Writable(); err != nil {
				return 0, 0, err
			}
			out, err := c.existence(key)
			return out, 0, err
		}
		idx, err := c.s.b.WriteIf(c.s.ctx, key, data, a, false, cas)
		if !errors.Is(err, store.ErrConditionFailed) {
			return outStored, idx, err
		}
		if mode == modeAdd {
			return outNotStored, 0, nil
		}
		out, err := c.existence(key)
		return out, 0, err
	}
	for range maxAttempts {
		cur, idx, found, err := c.lookup(key)
		switch {
		case err != nil:
			return 0, 0, err
		case !found && hasCas:
			return outNotFound, 0, nil
		case !found:
			return outNotStored, 0, nil
		case hasCas && idx != cas:
			return outExists, 0, nil
		}
		c.next = combine(c.next, mode, cur, data)
		if len(c.next) > c.s.cfg.MaxValueBytes {
			return 0, 0, errTooLarge
		}
		keep := a
		if mode != modeReplace {
			keep = c.curAttrs
		}
		w, err := c.s.b.WriteIf(c.s.ctx, key, c.next, keep, false, idx)
		if !errors.Is(err, store.ErrConditionFailed) {
			return outStored, w, err
		}
	}
	return 0, 0, errContended
}

// deleteKey deletes key; with hasCas only if it still has the unique cas.
func (c *conn) deleteKey(key []byte, hasCas bool, cas uint64) (outcome, error) {
	c.s.stats.cmdDelete.Add(1)
	var out outcome
	var err error
	switch {
	case !hasCas:
		var existed bool
		if _, existed, err = c.s.b.Delete(c.s.ctx, key); !existed {
			out = outNotFound
		}
	case cas == 0:
		if err = c.s.b.Writable(); err == nil {
			out, err = c.existence(key)
		}
	default:
		_, err = c.s.b.WriteIf(c.s.ctx, key, nil, Attrs{}, true, cas)
		if errors.Is(err, store.ErrConditionFailed) {
			out, err = c.existence(key)
		}
	}
	if err == nil && out == outStored {
		c.s.stats.deleteHits.Add(1)
	}
	return out, err
}

// arithOp is one incr or decr.
type arithOp struct {
	incr    bool
	delta   uint64
	create  bool   // a missing key is created with initial
	initial uint64 // the value a created key gets
	expires int64  // the expiry a created key gets (0: never)
	hasCas  bool
	cas     uint64
}

// incrDecr runs op on key and returns the new value and the write's index.
// The key keeps its attributes (a created key gets flags 0 and op.expires).
func (c *conn) incrDecr(key []byte, op arithOp) (uint64, uint64, outcome, error) {
	if err := c.s.b.Writable(); err != nil {
		return 0, 0, 0, err
	}
	for range maxAttempts {
		cur, idx, found, err := c.lookup(key)
		if err != nil {
			return 0, 0, 0, err
		}
		var v uint64
		a := c.curAttrs
		switch {
		case !found && !op.create:
			return 0, 0, outNotFound, nil
		case !found:
			v, idx, a = op.initial, 0, Attrs{Expires: op.expires}
		case op.hasCas && idx != op.cas:
			return 0, 0, outExists, nil
		default:
			var ok bool
			if v, ok = arith(cur, op.incr, op.delta); !ok {
				return 0, 0, outNonNumeric, nil
			}
		}
		c.next = strconv.AppendUint(c.next[:0], v, 10)
		w, err := c.s.b.WriteIf(c.s.ctx, key, c.next, a, false, idx)
		if !errors.Is(err, store.ErrConditionFailed) {
			return v, w, outStored, err
		}
	}
	return 0, 0, 0, errContended
}

// touch gives key the expiry exptime (expiresAt), keeping its value and
// client flags, and returns the key's index after it; the value is left
// in c.cur. A touch that changes nothing (the same expiry) writes
// nothing. Giving a key a new expiry is a write of the log: the key's
// index, its cas unique, changes.
func (c *conn) touch(key []byte, exptime int64) (outcome, uint64, error) {
	if err := c.s.b.Writable(); err != nil {
		return 0, 0, err
	}
	for range maxAttempts {
		_, idx, found, err := c.lookup(key)
		switch {
		case err != nil:
			return 0, 0, err
		case !found:
			return outNotFound, 0, nil
		}
		a := Attrs{Flags: c.curAttrs.Flags, Expires: expires(exptime)}
		if a == c.curAttrs {
			return outStored, idx, nil
		}
		w, err := c.s.b.WriteIf(c.s.ctx, key, c.cur, a, false, idx)
		if !errors.Is(err, store.ErrConditionFailed) {
			if err == nil {
				c.curAttrs, c.curIndex = a, w
			}
			return outStored, w, err
		}
	}
	return 0, 0, errContended
}

// ttl is what memcached reports as a key's remaining time to live in
// seconds: -1 when it never expires.
func ttl(a Attrs, now int64) int64 {
	if a.Expires == 0 {
		return -1
	}
	return max(0, (a.Expires-now+999_999_999)/1e9)
}

// failed answers an operation error: a refusal of this package or the
// backend's.
func (c *conn) failed(err error) {
	if pe, ok := err.(*protoError); ok {
		c.m.errorsByKind[pe.kind].Inc()
		c.debug("memcache: request refused", "cmd", c.req.cmd.String(), "reply", pe.msg)
		c.replyLine(pe.msg)
		return
	}
	c.backendFailed(err)
}
