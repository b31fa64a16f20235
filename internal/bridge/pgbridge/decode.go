package pgbridge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Change is one change to the bridged table, in qs terms.
type Change struct {
	Key    string
	Delete bool
	// Truncate: every row of the table is gone (Key is empty).
	Truncate bool
	// Value is the row's JSON; nil when the row has unchanged fields
	// (Unresolved) that must be filled in from the row's current value.
	Value      []byte
	Unresolved []Field
	Cols       []Column
}

// Txn is one committed PostgreSQL transaction's changes to the table.
type Txn struct {
	// Commit is the LSN of the commit record, End the LSN just past it:
	// the position qs holds once this transaction is applied.
	Commit, End pglogrepl.LSN
	Time        time.Time
	Changes     []Change
}

// ErrDecode says the replication stream held something the bridge cannot
// map (a message out of order, a relation it was not told about).
var ErrDecode = errors.New("pgbridge: undecodable replication message")

type relation struct {
	ours   bool
	cols   []Column
	keyCol int
}

// Decoder turns pgoutput messages (protocol version 1) into transactions
// of the bridged table. It keeps the relations it was told about and the
// transaction in progress; it does no I/O.
type Decoder struct {
	schema, table, keyColumn, prefix string

	rels map[uint32]*relation
	cur  *Txn
}

// NewDecoder returns a Decoder for schema.table keyed by keyColumn.
func NewDecoder(schema, table, keyColumn, prefix string) *Decoder {
	return &Decoder{schema: schema, table: table, keyColumn: keyColumn, prefix: prefix, rels: map[uint32]*relation{}}
}

// Parse decodes one pgoutput message; a malformed one is ErrDecode.
func Parse(data []byte) (msg pglogrepl.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("%w: %v", ErrDecode, r)
		}
	}()
	if err := checkTuples(data); err != nil {
		return nil, err
	}
	msg, err = pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return msg, nil
}

// checkTuples checks that every column of the row images of an insert,
// update or delete message fits in the message before pglogrepl decodes
// it: pglogrepl allocates a column's declared length (up to 4 GiB) before
// it finds the bytes missing.
func checkTuples(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty message", ErrDecode)
	}
	switch data[0] {
	case 'I', 'U', 'D':
	default:
		return nil
	}
	b := data[1:]
	if len(b) < 4 {
		return fmt.Errorf("%w: %c message truncated", ErrDecode, data[0])
	}
	b = b[4:] // relation id
	for len(b) > 0 {
		switch b[0] {
		case 'N', 'K', 'O': // a row image follows
		default:
			return fmt.Errorf("%w: %c message: row image tag %q", ErrDecode, data[0], b[0])
		}
		b = b[1:]
		if len(b) < 2 {
			return fmt.Errorf("%w: %c message: column count truncated", ErrDecode, data[0])
		}
		cols := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		for i := 0; i < cols; i++ {
			if len(b) < 1 {
				return fmt.Errorf("%w: %c message: column %d of %d missing", ErrDecode, data[0], i+1, cols)
			}
			kind := b[0]
			b = b[1:]
			if kind != 't' && kind != 'b' {
				continue
			}
			if len(b) < 4 {
				return fmt.Errorf("%w: %c message: column %d length truncated", ErrDecode, data[0], i+1)
			}
			n := uint64(binary.BigEndian.Uint32(b))
			b = b[4:]
			if n > uint64(len(b)) {
				return fmt.Errorf("%w: %c message: column %d declares %d bytes, %d remain", ErrDecode, data[0], i+1, n, len(b))
			}
			b = b[n:]
		}
	}
	return nil
}

// InTxn reports whether a transaction has begun and not yet committed.
func (d *Decoder) InTxn() bool { return d.cur != nil }

// Handle takes the next message and returns the transaction it completes
// (at a commit), else nil.
func (d *Decoder) Handle(msg pglogrepl.Message) (*Txn, error) {
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		return nil, d.relation(m)
	case *pglogrepl.BeginMessage:
		if d.cur != nil {
			return nil, fmt.Errorf("%w: begin inside a transaction", ErrDecode)
		}
		d.cur = &Txn{Commit: m.FinalLSN, Time: m.CommitTime}
	case *pglogrepl.CommitMessage:
		if d.cur == nil {
			return nil, fmt.Errorf("%w: commit outside a transaction", ErrDecode)
		}
		t := d.cur
		d.cur = nil
		t.Commit, t.End, t.Time = m.CommitLSN, m.TransactionEndLSN, m.CommitTime
		return t, nil
	case *pglogrepl.InsertMessage:
		rel, err := d.rel(m.RelationID)
		if err != nil || !rel.ours {
			return nil, err
		}
		c, err := d.set(rel, m.Tuple)
		if err != nil {
			return nil, err
		}
		d.cur.Changes = append(d.cur.Changes, c)
	case *pglogrepl.UpdateMessage:
		rel, err := d.rel(m.RelationID)
		if err != nil || !rel.ours {
			return nil, err
		}
		c, err := d.set(rel, m.NewTuple)
		if err != nil {
			return nil, err
		}
		if m.OldTuple != nil {
			// The key changed (or the table's replica identity is FULL):
			// the row left its old key.
			old, err := KeyOf(d.prefix, rel.keyCol, fields(m.OldTuple))
			if err != nil {
				return nil, fmt.Errorf("%w: update's old row: %v", ErrDecode, err)
			}
			if old != c.Key {
				d.cur.Changes = append(d.cur.Changes, Change{Key: old, Delete: true})
			}
		}
		d.cur.Changes = append(d.cur.Changes, c)
	case *pglogrepl.DeleteMessage:
		rel, err := d.rel(m.RelationID)
		if err != nil || !rel.ours {
			return nil, err
		}
		if m.OldTuple == nil {
			return nil, fmt.Errorf("%w: delete without the old key", ErrDecode)
		}
		k, err := KeyOf(d.prefix, rel.keyCol, fields(m.OldTuple))
		if err != nil {
			return nil, fmt.Errorf("%w: delete: %v", ErrDecode, err)
		}
		d.cur.Changes = append(d.cur.Changes, Change{Key: k, Delete: true})
	case *pglogrepl.TruncateMessage:
		if d.cur == nil {
			return nil, fmt.Errorf("%w: truncate outside a transaction", ErrDecode)
		}
		for _, id := range m.RelationIDs {
			if r, ok := d.rels[id]; ok && r.ours {
				d.cur.Changes = append(d.cur.Changes, Change{Truncate: true})
			}
		}
	}
	// Type, origin and logical decoding messages change no row.
	return nil, nil
}

func (d *Decoder) relation(m *pglogrepl.RelationMessage) error {
	r := &relation{ours: m.Namespace == d.schema && m.RelationName == d.table, keyCol: -1}
	for i, c := range m.Columns {
		r.cols = append(r.cols, Column{Name: c.Name, Type: c.DataType})
		if c.Name == d.keyColumn {
			r.keyCol = i
		}
	}
	if r.ours && r.keyCol < 0 {
		return fmt.Errorf("%w: table %s.%s has no column %q any more", ErrDecode, d.schema, d.table, d.keyColumn)
	}
	d.rels[m.RelationID] = r
	return nil
}

func (d *Decoder) rel(id uint32) (*relation, error) {
	if d.cur == nil {
		return nil, fmt.Errorf("%w: row change outside a transaction", ErrDecode)
	}
	r, ok := d.rels[id]
	if !ok {
		return nil, fmt.Errorf("%w: change to relation %d before its description", ErrDecode, id)
	}
	return r, nil
}

func (d *Decoder) set(rel *relation, t *pglogrepl.TupleData) (Change, error) {
	if t == nil {
		return Change{}, fmt.Errorf("%w: row change without its new row", ErrDecode)
	}
	row := fields(t)
	if len(row) != len(rel.cols) {
		return Change{}, fmt.Errorf("%w: row of %d columns for a relation of %d", ErrDecode, len(row), len(rel.cols))
	}
	k, err := KeyOf(d.prefix, rel.keyCol, row)
	if err != nil {
		return Change{}, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	c := Change{Key: k, Cols: rel.cols}
	for _, f := range row {
		if f.Unchanged {
			c.Unresolved = row
			return c, nil
		}
	}
	if c.Value, err = RowJSON(rel.cols, row, nil); err != nil {
		return Change{}, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return c, nil
}

func fields(t *pglogrepl.TupleData) []Field {
	out := make([]Field, len(t.Columns))
	for i, c := range t.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			out[i] = Field{Null: true}
		case pglogrepl.TupleDataTypeToast:
			out[i] = Field{Unchanged: true}
		default:
			out[i] = Field{Text: string(c.Data)}
		}
	}
	return out
}
