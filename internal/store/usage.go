package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Usage counts the live keys under a prefix and what they cost in the
// store. docs/storage.md ("Space per key") gives the formula.
type Usage struct {
	// Keys is the number of live keys.
	Keys int64
	// KeyBytes and ValueBytes are the lengths of the keys and values, as
	// written by clients.
	KeyBytes   int64
	ValueBytes int64
	// StoredBytes is what the keys take in the store's keyspaces: for every
	// Pebble key written for them (the value record under d<key>, the chunks
	// of a large value under c<len><key><n>), the Pebble key with its 8-byte
	// internal trailer and the Pebble value; plus, for a value kept only in
	// the log (an in-log record), the value's bytes in its log block. It is
	// counted before Pebble's block compression and indexes. The log's other
	// copies of values (every write until retention drops it) are not
	// counted: they are the log's cost (status log_bytes), shared by all.
	StoredBytes int64
}

// Overhead is StoredBytes beyond the keys and values themselves.
func (u Usage) Overhead() int64 { return u.StoredBytes - u.KeyBytes - u.ValueBytes }

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{Keys: u.Keys + o.Keys, KeyBytes: u.KeyBytes + o.KeyBytes, ValueBytes: u.ValueBytes + o.ValueBytes, StoredBytes: u.StoredBytes + o.StoredBytes}
}

// pebbleTrailer is the internal-key trailer (sequence number and kind)
// Pebble stores with every key.
const pebbleTrailer = 8

// PrefixUsage adds up the keys with prefix (nil or empty: every key) at the
// view's index. It reads each value record once, in key order, and checks
// its CRC, but never reads chunks or log blocks: their sizes follow from
// the record. The cost is one sequential pass over the prefix's value
// records (inline values included), like a scan without decoding values.
func (v *View) PrefixUsage(prefix []byte) (Usage, error) {
	lower := dataKey(nil, prefix)
	upper := prefixEnd(lower)
	var u Usage
	for ok := v.it.SeekGE(lower); ok; ok = v.it.Next() {
		k := v.it.Key()
		if (upper != nil && bytes.Compare(k, upper) >= 0) || k[0] != prefixData {
			break
		}
		raw, err := v.it.ValueAndErr()
		if err != nil {
			return Usage{}, err
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			v.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
			return Usage{}, fmt.Errorf("key %q: %w", k[1:], err)
		}
		klen := int64(len(k) - 1)
		u.Keys++
		u.KeyBytes += klen
		u.ValueBytes += int64(rec.valueLen)
		u.StoredBytes += int64(len(k)) + pebbleTrailer + int64(len(raw))
		switch {
		case rec.kind == recInLog:
			u.StoredBytes += int64(rec.valueLen)
		case rec.kind == recChunked:
			chunkKeyLen := 1 + int64(uvarintLen(uint64(klen))) + klen + 4
			u.StoredBytes += int64(rec.chunks)*(chunkKeyLen+pebbleTrailer+chunkOverhed) + int64(rec.valueLen)
		}
	}
	if err := v.it.Error(); err != nil {
		return Usage{}, err
	}
	return u, nil
}

// Totals returns the live-key counters (Stats.Keys, KeyBytes, ValueBytes)
// as of the view's index.
func (v *View) Totals() (Usage, error) {
	if !v.it.SeekPrefixGE(metaStats) || !bytes.Equal(v.it.Key(), metaStats) {
		if err := v.it.Error(); err != nil {
			return Usage{}, err
		}
		return Usage{}, fmt.Errorf("%w: stats record missing", ErrCorrupt)
	}
	raw, err := v.it.ValueAndErr()
	if err != nil {
		return Usage{}, err
	}
	st, err := decodeStats(raw)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Keys: st.keys, KeyBytes: st.keyBytes, ValueBytes: st.valueBytes}, nil
}

func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}
