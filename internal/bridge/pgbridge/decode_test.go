package pgbridge

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/quicksilver-kv/qs/client"
)

func tuple(vals ...any) *pglogrepl.TupleData {
	t := &pglogrepl.TupleData{ColumnNum: uint16(len(vals))}
	for _, v := range vals {
		switch v := v.(type) {
		case nil:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull})
		case bool: // unchanged TOAST
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast})
		case string:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)})
		}
	}
	return t
}

func records(id uint32, schema, name string) *pglogrepl.RelationMessage {
	return &pglogrepl.RelationMessage{RelationID: id, Namespace: schema, RelationName: name, Columns: []*pglogrepl.RelationMessageColumn{
		{Name: "name", DataType: 25, Flags: 1}, {Name: "ttl", DataType: oidInt4}}}
}

// feed hands msgs to d and returns the transactions they complete.
func feed(t *testing.T, d *Decoder, msgs ...pglogrepl.Message) []*Txn {
	t.Helper()
	var out []*Txn
	for _, m := range msgs {
		txn, err := d.Handle(m)
		if err != nil {
			t.Fatalf("Handle(%T): %v", m, err)
		}
		if txn != nil {
			out = append(out, txn)
		}
	}
	return out
}

func TestDecoderTransaction(t *testing.T) {
	d := NewDecoder("public", "records", "name", "dns/")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	txns := feed(t, d,
		records(1, "public", "records"),
		records(2, "public", "other"), // another table of the publication
		&pglogrepl.BeginMessage{FinalLSN: 100},
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: tuple("a", "60")},
		&pglogrepl.InsertMessage{RelationID: 2, Tuple: tuple("x", "1")},
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: tuple("b", nil)},
		&pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'K', OldTuple: tuple("c", nil), NewTuple: tuple("c2", "5")},
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: tuple("d", true)},
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K', OldTuple: tuple("e", nil)},
		&pglogrepl.CommitMessage{CommitLSN: 100, TransactionEndLSN: 120, CommitTime: at},
	)
	if len(txns) != 1 {
		t.Fatalf("%d transactions", len(txns))
	}
	cols := []Column{{"name", 25}, {"ttl", oidInt4}}
	want := &Txn{Commit: 100, End: 120, Time: at, Changes: []Change{
		{Key: "dns/a", Value: []byte(`{"name":"a","ttl":60}`), Cols: cols},
		{Key: "dns/b", Value: []byte(`{"name":"b","ttl":null}`), Cols: cols},
		{Key: "dns/c", Delete: true},
		{Key: "dns/c2", Value: []byte(`{"name":"c2","ttl":5}`), Cols: cols},
		{Key: "dns/d", Unresolved: []Field{{Text: "d"}, {Unchanged: true}}, Cols: cols},
		{Key: "dns/e", Delete: true},
	}}
	if !reflect.DeepEqual(txns[0], want) {
		t.Fatalf("got  %+v\nwant %+v", txns[0], want)
	}
	if d.InTxn() {
		t.Fatal("still in a transaction after its commit")
	}
	// A transaction of other tables only is empty; a truncate of ours is a change.
	txns = feed(t, d,
		&pglogrepl.BeginMessage{FinalLSN: 200},
		&pglogrepl.InsertMessage{RelationID: 2, Tuple: tuple("x", "1")},
		&pglogrepl.CommitMessage{CommitLSN: 200, TransactionEndLSN: 210},
		&pglogrepl.BeginMessage{FinalLSN: 300},
		&pglogrepl.TruncateMessage{RelationIDs: []uint32{2, 1}},
		&pglogrepl.CommitMessage{CommitLSN: 300, TransactionEndLSN: 310},
	)
	if len(txns) != 2 || len(txns[0].Changes) != 0 || len(txns[1].Changes) != 1 || !txns[1].Changes[0].Truncate {
		t.Fatalf("got %+v", txns)
	}
}

func TestDecoderRefusesMalformedStreams(t *testing.T) {
	cases := map[string][]pglogrepl.Message{
		"insert outside a transaction": {records(1, "public", "records"), &pglogrepl.InsertMessage{RelationID: 1, Tuple: tuple("a", "1")}},
		"unknown relation":             {&pglogrepl.BeginMessage{}, &pglogrepl.InsertMessage{RelationID: 9, Tuple: tuple("a", "1")}},
		"commit outside a transaction": {&pglogrepl.CommitMessage{}},
		"begin inside a transaction":   {&pglogrepl.BeginMessage{}, &pglogrepl.BeginMessage{}},
		"row of the wrong width":       {records(1, "public", "records"), &pglogrepl.BeginMessage{}, &pglogrepl.InsertMessage{RelationID: 1, Tuple: tuple("a")}},
		"null key":                     {records(1, "public", "records"), &pglogrepl.BeginMessage{}, &pglogrepl.InsertMessage{RelationID: 1, Tuple: tuple(nil, "1")}},
		"delete without its key":       {records(1, "public", "records"), &pglogrepl.BeginMessage{}, &pglogrepl.DeleteMessage{RelationID: 1}},
		"key column dropped": {&pglogrepl.RelationMessage{RelationID: 1, Namespace: "public", RelationName: "records",
			Columns: []*pglogrepl.RelationMessageColumn{{Name: "other", DataType: 25}}}},
		"bad integer": {records(1, "public", "records"), &pglogrepl.BeginMessage{}, &pglogrepl.InsertMessage{RelationID: 1, Tuple: tuple("a", "x")}},
	}
	for name, msgs := range cases {
		d := NewDecoder("public", "records", "name", "")
		var err error
		for _, m := range msgs {
			if _, err = d.Handle(m); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want ErrDecode", name, err)
		}
	}
}

// fakeCurrent is what qs holds, for Ops.
type fakeCurrent map[string]string

func (f fakeCurrent) Get(_ context.Context, k string) ([]byte, error) {
	if v, ok := f[k]; ok {
		return []byte(v), nil
	}
	return nil, nil
}

func (f fakeCurrent) Keys(_ context.Context, prefix string) ([]string, error) {
	var out []string
	for k := range f {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			out = append(out, k)
		}
	}
	return out, nil
}

func TestOps(t *testing.T) {
	cols := []Column{{"name", 25}, {"blob", 25}}
	cur := fakeCurrent{"p/a": `{"name":"a","blob":"big"}`, "p/old": `{}`}
	ctx := context.Background()
	ops, err := Ops(ctx, []Change{
		{Key: "p/b", Value: []byte(`1`)},
		{Key: "p/a", Unresolved: []Field{{Text: "a"}, {Unchanged: true}}, Cols: cols}, // from qs
		{Key: "p/b", Delete: true},
		{Key: "p/c", Value: []byte(`{"name":"c","blob":"mid"}`)},
		{Key: "p/c", Unresolved: []Field{{Text: "c"}, {Unchanged: true}}, Cols: cols}, // from this transaction
	}, "p/", cur)
	want := []client.Op{
		{Key: "p/b", Delete: true},
		{Key: "p/a", Value: []byte(`{"name":"a","blob":"big"}`)},
		{Key: "p/c", Value: []byte(`{"name":"c","blob":"mid"}`)},
	}
	if err != nil || !reflect.DeepEqual(ops, want) {
		t.Fatalf("Ops = %+v, %v\nwant %+v", ops, err, want)
	}
	ops, err = Ops(ctx, []Change{{Key: "p/new", Value: []byte(`1`)}, {Truncate: true}, {Key: "p/after", Value: []byte(`2`)}}, "p/", cur)
	got := map[string]bool{}
	for _, op := range ops {
		got[op.Key] = op.Delete
	}
	if err != nil || len(ops) != 4 || !got["p/a"] || !got["p/old"] || !got["p/new"] || got["p/after"] {
		t.Fatalf("truncate: %+v, %v", ops, err)
	}
	_, err = Ops(ctx, []Change{{Key: "p/z", Unresolved: []Field{{Text: "z"}, {Unchanged: true}}, Cols: cols}}, "p/", cur)
	if !errors.Is(err, ErrDecode) {
		t.Fatalf("an unchanged value qs does not hold: %v", err)
	}
}

// A column that declares more bytes than the message holds is refused
// before anything is allocated for it.
func TestParseRefusesOversizedColumns(t *testing.T) {
	for name, data := range map[string][]byte{
		"insert 4 GiB column": []byte("I\x00\x00\x00\x01N\x00\x01t\xff\xff\xff\xffab"),
		"update 1 MiB column": []byte("U\x00\x00\x00\x01N\x00\x01t\x00\x10\x00\x00ab"),
		"delete column count": []byte("D\x00\x00\x00\x01K\x00\x05n"),
		"bad row image tag":   []byte("I\x00\x00\x00\x01Z\x00\x00"),
		"truncated relation":  []byte("I\x00\x01"),
		"empty":               {},
	} {
		if _, err := Parse(data); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: Parse = %v, want ErrDecode", name, err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	Parse([]byte("I\x00\x00\x00\x01N\x00\x01t\x01\x00\x00\x00ab")) // declares 16 MiB
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("refusing a column that declares 16 MiB allocated %d bytes", n)
	}
	for name, data := range map[string][]byte{
		"insert":              []byte("I\x00\x00\x00\x01N\x00\x02t\x00\x00\x00\x01at\x00\x00\x00\x0260"),
		"update with old key": []byte("U\x00\x00\x00\x01K\x00\x01t\x00\x00\x00\x01aN\x00\x02t\x00\x00\x00\x01bn"),
		"delete":              []byte("D\x00\x00\x00\x01K\x00\x02t\x00\x00\x00\x01an"),
	} {
		if _, err := Parse(data); err != nil {
			t.Errorf("%s: Parse = %v", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range [][]byte{
		[]byte("B\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"),
		[]byte("R\x00\x00\x00\x01public\x00records\x00d\x00\x02\x01name\x00\x00\x00\x00\x19\xff\xff\xff\xff\x00ttl\x00\x00\x00\x00\x17\xff\xff\xff\xff"),
		[]byte("I\x00\x00\x00\x01N\x00\x02t\x00\x00\x00\x01at\x00\x00\x00\x0260"),
		[]byte("U\x00\x00\x00\x01N\x00\x02t\x00\x00\x00\x01au"),
		[]byte("D\x00\x00\x00\x01K\x00\x02t\x00\x00\x00\x01an"),
		[]byte("I\x00\x00\x00\x01N\x00\x05t\xff"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder("public", "records", "name", "p/")
		d.Handle(records(1, "public", "records"))
		d.Handle(&pglogrepl.BeginMessage{})
		msg, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("Parse error %v is not ErrDecode", err)
			}
			return
		}
		if _, err := d.Handle(msg); err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("Handle error %v is not ErrDecode", err)
		}
	})
}
