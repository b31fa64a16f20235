package raftroot

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// A command is the data of one normal Raft entry: a write or a heartbeat,
// with the time its proposer chose and a random id by which the proposer
// recognises its outcome when the entry is applied.
//
//	command := version(1)=1 id(16) bodylen(uvarint) body ncond(uvarint) cond* idlen(uvarint) batchid
//	body    := a wal entry body (wal.Entry.AppendBody) with index 0: kind, time, ops
//	cond    := keylen(uvarint) key index(8 BE)
//
// An empty entry (a new leader's) carries no command.

const commandVersion = 1

// errMalformedCommand: a Raft entry's data is not a command. Every member
// decodes the same bytes, so every member skips it alike.
var errMalformedCommand = errors.New("qs: malformed raft command")

type command struct {
	id        [16]byte
	time      int64
	heartbeat bool
	batch     store.Batch
}

func (c *command) encode() []byte {
	e := wal.Entry{Kind: wal.KindData, Time: c.time, Ops: c.batch.Ops}
	if c.heartbeat {
		e.Kind = wal.KindHeartbeat
	}
	n := 1 + 16 + 10 + e.BodySize() + 10 + len(c.batch.ID) + 10
	for _, cd := range c.batch.Conds {
		n += 10 + len(cd.Key) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, commandVersion)
	b = append(b, c.id[:]...)
	b = binary.AppendUvarint(b, uint64(e.BodySize()))
	b = e.AppendBody(b)
	b = binary.AppendUvarint(b, uint64(len(c.batch.Conds)))
	for _, cd := range c.batch.Conds {
		b = binary.AppendUvarint(b, uint64(len(cd.Key)))
		b = append(b, cd.Key...)
		b = binary.BigEndian.AppendUint64(b, cd.Index)
	}
	b = binary.AppendUvarint(b, uint64(len(c.batch.ID)))
	return append(b, c.batch.ID...)
}

// decodeCommand parses a command. Keys and values alias b.
func decodeCommand(b []byte) (command, error) {
	var c command
	if len(b) < 1+16 || b[0] != commandVersion {
		return c, fmt.Errorf("%w: %d bytes, version %v", errMalformedCommand, len(b), b[:min(1, len(b))])
	}
	copy(c.id[:], b[1:17])
	b = b[17:]
	body, b, err := take(b, len(b))
	if err != nil {
		return c, fmt.Errorf("%w: body: %v", errMalformedCommand, err)
	}
	e, err := wal.DecodeBody(body)
	if err != nil {
		return c, fmt.Errorf("%w: %v", errMalformedCommand, err)
	}
	c.time, c.heartbeat, c.batch.Ops = e.Time, e.Kind == wal.KindHeartbeat, e.Ops
	nc, n := binary.Uvarint(b)
	if n <= 0 || nc > uint64(len(b)) {
		return c, fmt.Errorf("%w: condition count", errMalformedCommand)
	}
	b = b[n:]
	for i := uint64(0); i < nc; i++ {
		var k []byte
		if k, b, err = take(b, wal.MaxKeyLen); err != nil || len(b) < 8 {
			return c, fmt.Errorf("%w: condition %d", errMalformedCommand, i)
		}
		c.batch.Conds = append(c.batch.Conds, store.Cond{Key: k, Index: binary.BigEndian.Uint64(b)})
		b = b[8:]
	}
	id, b, err := take(b, store.MaxBatchIDBytes)
	if err != nil || len(b) != 0 {
		return c, fmt.Errorf("%w: batch id or trailing bytes", errMalformedCommand)
	}
	if len(id) > 0 {
		c.batch.ID = id
	}
	return c, nil
}

// take reads a uvarint length (at most max) and that many bytes.
func take(b []byte, max int) (v, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, nil, errors.New("bad length")
	}
	if l > uint64(max) || l > uint64(len(b)-n) {
		return nil, nil, fmt.Errorf("length %d over %d or beyond the data", l, min(max, len(b)-n))
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}
