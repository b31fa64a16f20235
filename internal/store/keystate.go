package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// keyState is what the committer knows of a key: from the store, then
// updated by the ops of the group.
type keyState struct {
	exists   bool
	index    uint64
	attrs    valueAttrs // what was stored with the value
	value    []byte     // nil for a chunked value not loaded
	valueLen int
	valueCRC uint32 // valid when chunks > 0
	chunks   int
	corrupt  bool    // the stored record failed its CRC: chunks unknown
	logRec   *record // the stored in-log record, when the value is in the log
	remote   bool    // proxy: the value is not stored here (valueCRC is set unless corrupt)
	// digest of a remote value, when its record has one.
	digest    ValueDigest
	hasDigest bool
}

// state returns what the group knows of key, loading it from the store the
// first time. A corrupt record is treated as an existing key with an
// unknown value, so it can be overwritten (which repairs it).
func (c *committer) state(key []byte) (*keyState, error) {
	if ks, ok := c.g.overlay[string(key)]; ok {
		return ks, nil
	}
	ks := &keyState{}
	c.g.kbuf = dataKey(c.g.kbuf, key)
	v, found, err := c.lookup(c.g.kbuf)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: read %q: %v", ErrWriteFailed, key, err)
	case !found:
	default:
		rec, derr := decodeRecord(v)
		if derr != nil {
			c.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
			c.s.opts.Logger.Error("corrupt value record found while writing; it will be overwritten", "db", c.s.opts.Name, "key", fmt.Sprintf("%q", key), "err", derr)
			ks.exists, ks.corrupt = true, true
			ks.valueLen, ks.remote = salvage(v)
		} else {
			ks.exists, ks.index, ks.attrs, ks.valueLen, ks.chunks = true, rec.index, rec.attrs, rec.valueLen, rec.chunks
			switch {
			case rec.kind == recChunked:
				ks.valueCRC = rec.valueCRC
			case rec.kind == recRemote:
				ks.remote, ks.valueCRC = true, rec.valueCRC
				ks.digest, ks.hasDigest = rec.digest, rec.hasDigest
			case rec.kind == recInLog:
				ks.valueCRC = rec.valueCRC
				r := rec
				ks.logRec = &r
			default:
				ks.value = append([]byte(nil), rec.inline...)
			}
		}
	}
	c.g.overlay[string(key)] = ks
	return ks, nil
}

// lookup reads a key as committed before this group, through one iterator
// per group that consults bloom filters on every level (absent keys, the
// common case for new writes, then cost no data block read). The value is
// valid until the next lookup.
func (c *committer) lookup(k []byte) ([]byte, bool, error) {
	if _, err := c.iter(); err != nil {
		return nil, false, err
	}
	if !c.g.it.SeekPrefixGE(k) || !bytes.Equal(c.g.it.Key(), k) {
		return nil, false, c.g.it.Error()
	}
	v, err := c.g.it.ValueAndErr()
	return v, err == nil, err
}

// salvage is the value length a corrupt record states, and whether it is
// a proxy's remote record (its value not stored here), read ignoring its
// CRC, so that overwriting or deleting it keeps the stats and a proxy's
// cache counters exact when the damage is in the value bytes (a guess
// otherwise). Never served.
func salvage(b []byte) (valueLen int, remote bool) {
	if len(b) < recHeader {
		return 0, false
	}
	fixed := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(fixed, crc(fixed[4:]))
	r, err := decodeRecord(fixed)
	if err != nil {
		return 0, false
	}
	return r.valueLen, r.kind == recRemote
}

// errValueDamaged: the key's stored value cannot be read (its record,
// chunks or log block fail their checks), so whether a write changes it
// is unknown.
var errValueDamaged = fmt.Errorf("%w: stored value unreadable", ErrCorrupt)

// storedValueIs reports whether the key's current value equals v; an
// error wrapping errValueDamaged if the stored value is unreadable.
func (c *committer) storedValueIs(key []byte, ks *keyState, v []byte) (bool, error) {
	if ks.corrupt {
		return false, fmt.Errorf("%w: key %q: its record is corrupt", errValueDamaged, key)
	}
	if ks.valueLen != len(v) {
		return false, nil
	}
	if ks.value != nil {
		// Loaded, or set earlier in the group: the stored chunks or log
		// block may hold the value before the group.
		return bytes.Equal(ks.value, v), nil
	}
	if ks.logRec != nil {
		if ks.valueCRC != crc(v) {
			return false, nil
		}
		it, err := c.iter()
		if err != nil {
			return false, err
		}
		cur, err := c.s.readInLog(it, *ks.logRec, nil)
		if err != nil {
			return false, fmt.Errorf("%w: key %q: %v", errValueDamaged, key, err)
		}
		return bytes.Equal(cur, v), nil
	}
	if ks.chunks == 0 {
		return bytes.Equal(ks.value, v), nil // nil and empty are the same value
	}
	if ks.valueCRC != crc(v) {
		return false, nil
	}
	it, err := c.s.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	defer it.Close()
	cur, err := readChunks(it, key, ks.chunks, ks.valueLen, ks.valueCRC, nil)
	if err != nil {
		return false, fmt.Errorf("%w: key %q: %v", errValueDamaged, key, err)
	}
	return bytes.Equal(cur, v), nil
}

// iter returns the group's iterator over the committed state.
func (c *committer) iter() (*pebble.Iterator, error) {
	if c.g.it == nil {
		it, err := c.s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return nil, err
		}
		c.g.it = it
	}
	return c.g.it, nil
}

// storedDigest is the digest of the key's stored value (a value a proxy
// evicts, which its remote record must describe); nil if the value cannot
// be read, and the record then keeps only its length and CRC.
func (c *committer) storedDigest(key []byte, ks *keyState) *ValueDigest {
	var v []byte
	var err error
	switch {
	case ks.corrupt:
		return nil
	case ks.value != nil || (ks.chunks == 0 && ks.logRec == nil):
		v = ks.value
	case ks.logRec != nil:
		var it *pebble.Iterator
		if it, err = c.iter(); err == nil {
			v, err = c.s.readInLog(it, *ks.logRec, nil)
		}
	default:
		var it *pebble.Iterator
		if it, err = c.s.db.NewIter(nil); err == nil {
			v, err = readChunks(it, key, ks.chunks, ks.valueLen, ks.valueCRC, nil)
			it.Close()
		}
	}
	if err != nil {
		c.s.opts.Logger.Warn("proxy evicts a value it cannot read; its record keeps only length and CRC", "db", c.s.opts.Name, "key", fmt.Sprintf("%q", key), "err", err)
		return nil
	}
	d := ValueDigestOf(v)
	return &d
}
