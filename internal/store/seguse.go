package store

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// segUse is what points into one log segment: block keys, and the bytes of
// their blocks. A segment none points into is removed (segmentLoop).
type segUse struct{ blocks, bytes int64 }

func segUseKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), metaSegUse...), seq)
}

func (u segUse) encode() []byte {
	return binary.AppendUvarint(binary.AppendUvarint(nil, uint64(u.blocks)), uint64(u.bytes))
}

func decodeSegUse(v []byte) (segUse, error) {
	b, n := binary.Uvarint(v)
	if n <= 0 {
		return segUse{}, fmt.Errorf("%w: bad segment use %x", ErrCorrupt, v)
	}
	by, m := binary.Uvarint(v[n:])
	if m <= 0 || n+m != len(v) || b > 1<<40 || by > 1<<62 {
		return segUse{}, fmt.Errorf("%w: bad segment use %x", ErrCorrupt, v)
	}
	return segUse{blocks: int64(b), bytes: int64(by)}, nil
}

// segUses reads every segment's use.
func segUses(r pebble.Reader) (map[uint64]segUse, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: metaSegUse, UpperBound: prefixEnd(metaSegUse)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[uint64]segUse{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(metaSegUse)+8 {
			return nil, fmt.Errorf("%w: bad segment use key %x", ErrCorrupt, k)
		}
		u, err := decodeSegUse(it.Value())
		if err != nil {
			return nil, err
		}
		out[binary.BigEndian.Uint64(k[len(metaSegUse):])] = u
	}
	return out, it.Error()
}

// dropBlock deletes log block b in the group, counting it out of its
// segment.
func (c *committer) dropBlock(b uint64) error {
	v, found, err := c.lookup(logKey(b))
	if err != nil {
		return err
	}
	if found {
		ref, isRef, err := decodeBlockRef(v)
		if err != nil {
			return err
		}
		if isRef {
			c.g.useSegment(ref.seq, int64(ref.n), -1)
		}
	}
	c.g.batch.Delete(logKey(b), nil)
	return nil
}

// writeSegUse puts the group's changes of segment use in the batch.
func (c *committer) writeSegUse() error {
	for seq, d := range c.g.segDelta {
		var u segUse
		v, found, err := c.lookup(segUseKey(seq))
		if err != nil {
			return err
		}
		if found {
			if u, err = decodeSegUse(v); err != nil {
				return err
			}
		}
		u.blocks += d.blocks
		u.bytes += d.bytes
		if u.blocks <= 0 {
			c.g.batch.Delete(segUseKey(seq), nil)
		} else {
			c.g.batch.Set(segUseKey(seq), u.encode(), nil)
		}
	}
	return nil
}
