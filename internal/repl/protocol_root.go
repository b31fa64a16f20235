package repl

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// The root's HTTP address: where the writes of a database are accepted.
// A root tells its stream clients, each replica tells its own, so that a
// write refused anywhere in the tree (not_root) names the place to send
// it, not the replication port a node streams from.
//
// A server sends a Root message to stream clients of RootVersion or later
// before the first entries, and again after an idle Progress whenever the
// addresses it knows changed. A server of an older version refuses the
// Hello with code "version": the client then speaks HeadVersion to it,
// and learns no root address from it.
const (
	// RootVersion is the first protocol version with Root messages.
	RootVersion uint16 = 5
	// MsgRoot carries the root's HTTP addresses, server → client, on
	// stream connections of version RootVersion or later.
	MsgRoot MsgType = 16
	// MaxRootAddrs bounds the addresses of one Root message, and
	// MaxRootAddr the length of each.
	MaxRootAddrs = 16
	MaxRootAddr  = 255
)

// Root names the HTTP addresses where the database's writes are accepted
// (the root; any member of an HA root), as the sending node knows them.
// None: the sender does not know them.
//
//	payload := count(uvarint ≤ 16) addr*
//	addr    := len(uvarint 1..255) bytes
type Root struct {
	HTTP []string
}

func (*Root) Type() MsgType { return MsgRoot }

func (m *Root) AppendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m.HTTP)))
	for _, a := range m.HTTP {
		dst = appendRootAddr(dst, a)
	}
	return dst
}

func appendRootAddr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func decodeRoot(p []byte) (*Root, error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > MaxRootAddrs {
		return nil, fmt.Errorf("%w: root with a bad address count", ErrMalformed)
	}
	p = p[k:]
	m := &Root{}
	for range n {
		a, rest, err := readString(p, MaxRootAddr)
		if err != nil {
			return nil, fmt.Errorf("%w: root address: %v", ErrMalformed, err)
		}
		if a == "" {
			return nil, fmt.Errorf("%w: empty root address", ErrMalformed)
		}
		m.HTTP, p = append(m.HTTP, a), rest
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after root", ErrMalformed, len(p))
	}
	return m, nil
}

// RootAddrs cleans the root addresses a node is about to send: empty
// ones dropped, duplicates dropped (the first kept), too long ones
// dropped, at most MaxRootAddrs. Pure.
func RootAddrs(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if a == "" || len(a) > MaxRootAddr || slices.Contains(out, a) {
			continue
		}
		if out = append(out, a); len(out) == MaxRootAddrs {
			break
		}
	}
	return out
}

// fallbackVersion is the Hello version a stream client tries next with a
// source that refused version v with code "version": RootVersion after a
// newer one, HeadVersion after that, then version 1 (which every server
// speaks). Pure.
func fallbackVersion(v uint16) uint16 {
	switch {
	case v > RootVersion:
		return RootVersion
	case v > HeadVersion:
		return HeadVersion
	}
	return streamVersion
}

// rootSender sends a stream client the root addresses when they changed
// since it last sent them (the first call always sends).
type rootSender struct {
	addrs func() []string // nil: the client is older than RootVersion
	sent  bool
	last  string
}

// send sends a Root with the addresses known now, if they changed.
func (rs *rootSender) send(cn *conn) error {
	if rs == nil || rs.addrs == nil {
		return nil
	}
	a := RootAddrs(rs.addrs())
	key := strings.Join(a, "\n")
	if rs.sent && key == rs.last {
		return nil
	}
	if err := cn.send(&Root{HTTP: a}); err != nil {
		return err
	}
	rs.sent, rs.last = true, key
	return nil
}
