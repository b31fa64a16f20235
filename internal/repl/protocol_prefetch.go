package repl

import (
	"encoding/binary"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// The prefetch stream (version 2): a proxy subscribes to a relay of its
// data centre with a Hello carrying the Prefetch flag. After the Welcome
// the relay sends a Prefetch message for every value it resolves for the
// other proxies of the data centre, and Progress when it has sent nothing
// for a while; the client sends nothing. A message may be lost (the
// relay drops what a slow subscriber cannot take, and a reconnecting
// subscriber misses what was sent meanwhile): a prefetch only saves a
// fetch, it never decides what a reader sees. See docs/protocol.md.

// MsgPrefetch is a server → client message of prefetch streams: one value
// a relay resolved.
const MsgPrefetch MsgType = 14

// Prefetch is one value a relay resolved: version Index of Key.
//
//	payload := index(8 BE, ≥ 1) keylen(uvarint 1..wal.MaxKeyLen) key value
//
// The value is the rest of the payload.
type Prefetch struct {
	Index uint64
	Key   []byte
	Value []byte
}

func (*Prefetch) Type() MsgType { return MsgPrefetch }

func (m *Prefetch) AppendPayload(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, m.Index)
	dst = binary.AppendUvarint(dst, uint64(len(m.Key)))
	dst = append(dst, m.Key...)
	return append(dst, m.Value...)
}

// decodePrefetch decodes a Prefetch; key and value alias p.
func decodePrefetch(p []byte) (*Prefetch, error) {
	if len(p) < 10 {
		return nil, fmt.Errorf("%w: prefetch of %d bytes", ErrMalformed, len(p))
	}
	m := &Prefetch{Index: binary.BigEndian.Uint64(p)}
	if m.Index == 0 {
		return nil, fmt.Errorf("%w: prefetch of version 0", ErrMalformed)
	}
	l, n := binary.Uvarint(p[8:])
	if n <= 0 || l == 0 || l > wal.MaxKeyLen || l > uint64(len(p)-8-n) {
		return nil, fmt.Errorf("%w: prefetch: bad key length", ErrMalformed)
	}
	key := p[8+n : 8+n+int(l)]
	m.Key = key[:len(key):len(key)]
	m.Value = p[8+n+int(l):]
	if len(m.Value) > wal.MaxValueLen {
		return nil, fmt.Errorf("%w: prefetch value of %d bytes over the %d limit", ErrMalformed, len(m.Value), wal.MaxValueLen)
	}
	return m, nil
}
