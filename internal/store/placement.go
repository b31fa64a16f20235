package store

import (
	"fmt"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// placement is where a node keeps the values of the sets it applies,
// chosen once for the store (placementOf): a full node (root, replica, HA
// root member) keeps every value; a proxy keeps only those its window
// holds, and a remote record for the others (proxy.go).
type placement interface {
	// applying is told the last index of the replicated entries about to
	// be applied.
	applying(c *committer, last uint64)
	// set writes the value record (and chunks) of op, applied at index,
	// over the key's state ks; valueOff is the value's offset in the
	// group's block. It returns the value's chunk count and whether the
	// value is stored remote.
	set(c *committer, op wal.Op, index uint64, valueOff int, ks *keyState) (chunks int, remote bool)
	// forget uncounts the stored value ks describes, being deleted.
	forget(c *committer, ks *keyState)
	// segmented: durable groups' blocks go to the log segments (a
	// proxy's stay in Pebble, where retention drops them within its
	// window).
	segmented() bool
	// cache applies a proxy's cache admissions and evictions (r.cache).
	cache(c *committer, r *request) error
	// publish exports the role's committed counters.
	publish(c *committer)
}

func placementOf(s *Store) placement {
	if s.px != nil {
		return proxyPlacement{}
	}
	return fullPlacement{}
}

// fullPlacement keeps every value: in the log only (a value of at least
// minInLogBytes that fits a chunk, when the block is stored uncompressed),
// inline, or in chunks.
type fullPlacement struct{}

func (fullPlacement) applying(*committer, uint64) {}

func (fullPlacement) set(c *committer, op wal.Op, index uint64, valueOff int, _ *keyState) (int, bool) {
	switch {
	case len(op.Value) >= minInLogBytes && len(op.Value) <= c.s.opts.ChunkBytes:
		c.g.inLog[string(op.Key)] = pendingValue{index: index, attrs: attrsOf(op), offset: valueOff, value: op.Value}
	case len(op.Value) <= c.s.opts.ChunkBytes:
		c.g.buf = encodeInline(c.g.buf, index, attrsOf(op), op.Value)
		c.g.batch.Set(c.g.kbuf, c.g.buf, nil)
	default:
		return c.writeValue(op.Key, index, attrsOf(op), op.Value), false
	}
	return 0, false
}

func (fullPlacement) forget(*committer, *keyState) {}

func (fullPlacement) segmented() bool { return true }

func (fullPlacement) cache(_ *committer, r *request) error {
	r.err = fmt.Errorf("%w: cache change on a full node", ErrInvalid)
	return nil
}

func (fullPlacement) publish(*committer) {}

// proxyPlacement keeps the values its window holds.
type proxyPlacement struct{}

func (proxyPlacement) applying(c *committer, last uint64) { c.px.windowFloor = c.px.state.floor(last) }

func (proxyPlacement) set(c *committer, op wal.Op, index uint64, _ int, ks *keyState) (int, bool) {
	return c.proxySet(op, index, ks)
}

func (proxyPlacement) forget(c *committer, ks *keyState) { c.px.forget(ks) }

func (proxyPlacement) segmented() bool { return false }

func (proxyPlacement) cache(c *committer, r *request) error { return c.prepareCache(r) }

func (proxyPlacement) publish(c *committer) {
	c.px.publish(c.s.m, c.last.index, c.g.logDropped)
}
