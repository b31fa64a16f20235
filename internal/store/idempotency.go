package store

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Idempotent writes. A batch may carry an ID chosen by its producer (the
// Go client sends a random one with every write and retries with the same
// ID). The committer records the outcome of each ID, in the same durable
// batch as the write, and answers a batch whose ID it has seen with the
// first outcome instead of applying it again: a write retried after a
// timeout, a lost answer or a failover is applied once. Outcomes are kept
// for IdempotencyWindow by the log's clock (the entries' times, which a
// jump of a clock cannot move far: rootClock, boundTime), then expired in the
// background of later commits. A batch refused (a failed condition, an
// error) records nothing: its retry is evaluated afresh.
//
//	i<id>              → index(8 BE) time(8 BE) changed(1): the outcome
//	j<time(8 BE)><id>  → empty: the same, in time order, for expiry

const (
	prefixBatchID   = 'i'
	prefixBatchTime = 'j'
	// MaxBatchIDBytes bounds a batch ID.
	MaxBatchIDBytes = 64
	// expireBatchIDs caps the expired IDs removed by one commit.
	expireBatchIDs = 1000
)

type batchOutcome struct {
	index   uint64
	time    int64
	changed bool
}

func batchIDKey(id []byte) []byte {
	return append([]byte{prefixBatchID}, id...)
}

func batchTimeKey(t int64, id []byte) []byte {
	k := binary.BigEndian.AppendUint64([]byte{prefixBatchTime}, uint64(t))
	return append(k, id...)
}

func (o batchOutcome) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, o.index)
	b = binary.BigEndian.AppendUint64(b, uint64(o.time))
	if o.changed {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeBatchOutcome(b []byte) (batchOutcome, error) {
	if len(b) != 17 || b[16] > 1 {
		return batchOutcome{}, fmt.Errorf("%w: batch outcome record of %d bytes", ErrCorrupt, len(b))
	}
	return batchOutcome{index: binary.BigEndian.Uint64(b), time: int64(binary.BigEndian.Uint64(b[8:])), changed: b[16] == 1}, nil
}

// storedOutcome returns the recorded outcome of id, from this group or
// the store. A stored outcome that does not decode is an error wrapping
// ErrCorrupt (counted as an integrity error): whether the batch was
// applied is unknown.
func (c *committer) storedOutcome(id []byte) (batchOutcome, bool, error) {
	if o, ok := c.g.ids[string(id)]; ok {
		return o, true, nil
	}
	v, found, err := c.lookup(batchIDKey(id))
	if err != nil || !found {
		return batchOutcome{}, false, err
	}
	o, err := decodeBatchOutcome(v)
	if err != nil {
		c.s.m.integrityErrors.WithLabelValues("batch_outcome").Inc()
		return batchOutcome{}, false, fmt.Errorf("batch id %q: %w; whether the batch was applied is unknown", id, err)
	}
	return o, true, nil
}

// writeBatchIDs adds the group's outcomes to the batch, and removes up to
// expireBatchIDs expired ones (at most once a second).
func (c *committer) writeBatchIDs() error {
	for id, o := range c.g.ids {
		c.g.batch.Set(batchIDKey([]byte(id)), o.encode(), nil)
		c.g.batch.Set(batchTimeKey(o.time, []byte(id)), nil, nil)
	}
	now := time.Now()
	if now.Sub(c.lastIDExpiry) < time.Second {
		return nil
	}
	c.lastIDExpiry = now
	// The log's own clock (bounded: rootClock, boundTime), never local
	// time: an outcome is removed only once every member judges it
	// expired, and a jump of a clock does not expire it early.
	cutoff := c.last.time - c.s.opts.IdempotencyWindow.Nanoseconds()
	if cutoff <= 0 {
		return nil
	}
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixBatchTime}, UpperBound: batchTimeKey(cutoff, nil)})
	if err != nil {
		return err
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok && n < expireBatchIDs; ok = it.Next() {
		k := it.Key()
		if len(k) < 9 {
			continue
		}
		t, id := int64(binary.BigEndian.Uint64(k[1:9])), k[9:]
		// The ID may have been used again since: remove its outcome only
		// if it is this one.
		if _, again := c.g.ids[string(id)]; !again {
			v, found, err := c.lookup(batchIDKey(id))
			if err != nil {
				return err
			}
			if o, err := decodeBatchOutcome(v); found && (err != nil || o.time == t) {
				c.g.batch.Delete(batchIDKey(id), nil)
			}
		}
		c.g.batch.Delete(k, nil)
		n++
	}
	c.s.m.batchIDsExpired.Add(float64(n))
	return it.Error()
}
