package repl

import (
	"encoding/binary"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/store"
)

// The L2 request (version 2): a proxy asks the owner of a key's shard in
// its data centre for exactly the version its own record names. The
// connection is opened with a Hello carrying the Shard flag; the server,
// a proxy, answers with its Welcome and then a Node message naming
// itself (its node name decides which shard it owns). The client then
// sends Fetch messages, every key with the version it needs (index ≥ 1),
// pipelined like a fetch connection; the server answers each with one
// Values message in order: FetchOK with the value, or FetchMismatch when
// it does not hold that version in memory or on disk. The server never
// fetches on behalf of the client, and a miss is not an error: the
// client asks a replica next. See docs/protocol.md.

// MsgNode is a server → client message of L2 connections, sent once
// after the Welcome: the server's node name.
const MsgNode MsgType = 15

// MaxNodeName bounds a node name on the wire.
const MaxNodeName = 255

// Node names the server of an L2 connection.
//
//	payload := namelen(uvarint 1..MaxNodeName) name
type Node struct {
	Name string
}

func (*Node) Type() MsgType { return MsgNode }

func (m *Node) AppendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m.Name)))
	return append(dst, m.Name...)
}

func decodeNode(p []byte) (*Node, error) {
	name, rest, err := readString(p, MaxNodeName)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: node name: %v", ErrMalformed, err)
	case name == "":
		return nil, fmt.Errorf("%w: empty node name", ErrMalformed)
	case len(rest) != 0:
		return nil, fmt.Errorf("%w: %d bytes after the node name", ErrMalformed, len(rest))
	}
	return &Node{Name: name}, nil
}

// checkShardFetch refuses an L2 request that does not name a version for
// every key (index 0 would ask for whatever is current: a fetch, not an
// L2 request).
func checkShardFetch(m *Fetch) error {
	for i, it := range m.Items {
		if it.Index == 0 {
			return fmt.Errorf("%w: L2 request key %d names no version", ErrMalformed, i)
		}
	}
	return nil
}

// answerShard answers an L2 request from what st holds: each key's value
// of exactly the version asked (store.ShardValue), or FetchMismatch, and
// counts the hits and misses in ms.
func answerShard(st *store.Store, m *Fetch, ms *Metrics) *Values {
	ans := &Values{ID: m.ID, Results: make([]FetchResult, len(m.Items))}
	ans.Applied = st.AppliedIndex()
	ans.Horizon = ans.Applied
	size, hits := 0, 0
	for i, it := range m.Items {
		r := &ans.Results[i]
		r.Status = FetchMismatch
		if size >= maxValuesBytes {
			r.Status = FetchSkipped
			continue
		}
		if val, ok := st.ShardValue(it.Key, it.Index); ok && len(val) <= MaxFetchValueBytes && (size == 0 || size+len(val) <= maxValuesBytes) {
			r.Status, r.Index, r.Value = FetchOK, it.Index, val
			size += len(val)
			hits++
		}
	}
	ms.addShardKeys(hits, len(m.Items)-hits)
	return ans
}
