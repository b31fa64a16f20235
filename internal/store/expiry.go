package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// Expiry of keys. A set may carry an expiry (wal.Op.Expires, a time on the
// log's clock). Nothing expires by itself: the root deletes expired keys
// by writing ordinary entries, each delete conditioned on the key still
// holding the version whose expiry came (ExpiryBatch), so every node
// applies the same deletions at the same index, and a read anywhere
// returns a key until, and never after, the entry that deletes it.
//
// Every node keeps an index of the keys that have an expiry, in expiry
// order, under prefixExpiry, written in the same batch as the records it
// describes:
//
//	key   := 'e' expires(8 BE) key
//	value := index(8 BE)    the index of the set that gave the expiry
//
// so the root (or whichever member of an HA root leads after a restart or
// a change of leader) finds the keys due without a scan of the data.

// prefixExpiry is the keyspace of the expiry index.
const prefixExpiry = 'e'

func expiryKey(dst []byte, expires int64, key []byte) []byte {
	dst = append(dst[:0], prefixExpiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(expires))
	return append(dst, key...)
}

// Expiry is a key with an expiry, as the expiry index lists it.
type Expiry struct {
	Key []byte
	// Index is the index of the set that gave the key its expiry.
	Index uint64
	// Expires is the log time (Unix ns) from which the key is deleted.
	Expires int64
}

// ExpiryBatch is the expiry policy: the batch the root writes at log time
// now to delete the keys of due whose expiry has come (Expires <= now), at
// most maxOps of them, earliest first. Each delete is conditioned on the
// key's index still being the one of the set that gave the expiry, so a
// key written again since (with a new expiry, or none) is not deleted: the
// whole batch then fails with ErrConditionFailed, and the caller lists the
// keys due again. An empty batch (no ops) means nothing is due.
func ExpiryBatch(due []Expiry, now int64, maxOps int) Batch {
	var b Batch
	for _, e := range due {
		if e.Expires > now || len(b.Ops) == maxOps {
			break
		}
		b.Ops = append(b.Ops, wal.Op{Type: wal.OpDelete, Key: e.Key})
		b.Conds = append(b.Conds, Cond{Key: e.Key, Index: e.Index})
	}
	return b
}

// DueExpiries lists, earliest first, at most limit keys whose expiry is at
// or before t, as of the applied index it returns. Index entries that no
// longer describe their key (left by a record that was corrupt when it
// was replaced) are skipped.
func (s *Store) DueExpiries(t int64, limit int) ([]Expiry, uint64, error) {
	v, err := s.View()
	if err != nil {
		return nil, 0, err
	}
	defer v.Close()
	it, err := v.it.Clone(pebble.CloneOptions{})
	if err != nil {
		return nil, 0, engineErr(err)
	}
	defer it.Close()
	var due []Expiry
	lower := []byte{prefixExpiry}
	upper := expiryKey(nil, t+1, nil)
	if t == 1<<63-1 {
		upper = []byte{prefixExpiry + 1}
	}
	for ok := it.SeekGE(lower); ok && len(due) < limit; ok = it.Next() {
		k := it.Key()
		if bytes.Compare(k, upper) >= 0 {
			break
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, engineErr(err)
		}
		if len(k) < 10 || len(raw) != 8 {
			return nil, 0, fmt.Errorf("%w: expiry index entry %q", ErrCorrupt, k)
		}
		e := Expiry{Key: bytes.Clone(k[9:]), Index: binary.BigEndian.Uint64(raw), Expires: int64(binary.BigEndian.Uint64(k[1:]))}
		if !v.describes(e) {
			continue
		}
		due = append(due, e)
	}
	if err := it.Error(); err != nil {
		return nil, 0, engineErr(err)
	}
	return due, v.index, nil
}

// describes reports whether e is what the key's record says: the same
// index and expiry.
func (v *View) describes(e Expiry) bool {
	raw, found, err := v.record(e.Key)
	if err != nil || !found {
		return false
	}
	rec, err := decodeRecord(raw)
	return err == nil && rec.index == e.Index && rec.attrs.expires == e.Expires
}

// indexExpiry keeps the expiry index of key as the op at index changes it
// from what ks held (before the op).
func (c *committer) indexExpiry(key []byte, ks *keyState, op wal.Op, index uint64) {
	if ks.exists && !ks.corrupt && ks.attrs.expires != 0 {
		c.g.batch.Delete(expiryKey(nil, ks.attrs.expires, key), nil)
	}
	if op.Type == wal.OpSet && op.Expires != 0 {
		c.g.batch.Set(expiryKey(nil, op.Expires, key), binary.BigEndian.AppendUint64(nil, index), nil)
	}
}
