package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// FuzzBatchDecode checks the batch request decoder: it never panics, fails
// only with bad_json or bad_request, and what it accepts is a valid batch
// that encodes back to a request decoding to the same batch. Seeds are in
// testdata/fuzz/FuzzBatchDecode and run with every go test.
func FuzzBatchDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeBatch(data)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || (ae.code != codeBadJSON && ae.code != codeBadRequest) {
				t.Fatalf("decode error %v is not bad_json or bad_request", err)
			}
			return
		}
		checkBatch(t, b)
		enc, err := encodeBatch(b)
		if err != nil {
			t.Fatalf("encode accepted batch: %v", err)
		}
		b2, err := decodeBatch(enc)
		if err != nil {
			t.Fatalf("re-encoded batch %s does not decode: %v", enc, err)
		}
		if !sameBatch(b, b2) {
			t.Fatalf("batch changed on re-encoding:\n%+v\n%s\n%+v", b, enc, b2)
		}
	})
}

// checkBatch checks what decodeBatch promises of an accepted batch.
func checkBatch(t *testing.T, b store.Batch) {
	t.Helper()
	if len(b.Ops) == 0 {
		t.Fatal("accepted a batch without ops")
	}
	for i, op := range b.Ops {
		if len(op.Key) == 0 {
			t.Fatalf("op %d: empty key accepted", i)
		}
		switch op.Type {
		case wal.OpSet:
			if op.Value == nil {
				t.Fatalf("op %d: set with a nil value", i)
			}
		case wal.OpDelete:
			if op.Value != nil {
				t.Fatalf("op %d: delete with a value", i)
			}
		default:
			t.Fatalf("op %d: type %d accepted", i, op.Type)
		}
	}
	for i, c := range b.Conds {
		if len(c.Key) == 0 {
			t.Fatalf("condition %d: empty key accepted", i)
		}
	}
}

func sameBatch(a, b store.Batch) bool {
	if len(a.Ops) != len(b.Ops) || len(a.Conds) != len(b.Conds) {
		return false
	}
	for i := range a.Ops {
		x, y := a.Ops[i], b.Ops[i]
		if x.Type != y.Type || !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) {
			return false
		}
	}
	for i := range a.Conds {
		if !bytes.Equal(a.Conds[i].Key, b.Conds[i].Key) || a.Conds[i].Index != b.Conds[i].Index {
			return false
		}
	}
	return true
}

// encodeBatch is the inverse of decodeBatch.
func encodeBatch(b store.Batch) ([]byte, error) {
	req := batchRequest{Ops: make([]batchOp, len(b.Ops))}
	for i, op := range b.Ops {
		o := batchOp{Key: string(op.Key)}
		switch op.Type {
		case wal.OpSet:
			v := base64.StdEncoding.EncodeToString(op.Value)
			o.Op, o.Value = opNameSet, &v
		case wal.OpDelete:
			o.Op = opNameDel
		default:
			return nil, errors.New("unknown op type")
		}
		req.Ops[i] = o
	}
	for _, c := range b.Conds {
		idx := c.Index
		req.If = append(req.If, batchCond{Key: string(c.Key), Index: &idx})
	}
	return json.Marshal(req)
}

// TestBatchDecode pins the decoding of a few requests.
func TestBatchDecode(t *testing.T) {
	b, err := decodeBatch([]byte(`{"ops":[{"op":"set","key":"k/ü","value":"aGk="},{"op":"del","key":"x"},{"op":"set","key":"e","value":""}],"if":[{"key":"k/ü","index":0},{"key":"x","index":18446744073709551615}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := store.Batch{
		Ops: []wal.Op{
			{Type: wal.OpSet, Key: []byte("k/ü"), Value: []byte("hi")},
			{Type: wal.OpDelete, Key: []byte("x")},
			{Type: wal.OpSet, Key: []byte("e"), Value: []byte{}},
		},
		Conds: []store.Cond{{Key: []byte("k/ü"), Index: 0}, {Key: []byte("x"), Index: 1<<64 - 1}},
	}
	if !sameBatch(b, want) {
		t.Fatalf("decoded %+v", b)
	}
	checkBatch(t, b)
}
