package httpapi

import (
	"bytes"
	"encoding/base64"

	"github.com/go-json-experiment/json"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// batchRequest is the body of POST /v1/{db}/batch:
//
//	{"ops": [{"op": "set", "key": "k", "value": "<base64>"}, {"op": "del", "key": "k2"}],
//	 "if":  [{"key": "k", "index": 7}]}
type batchRequest struct {
	Ops []batchOp   `json:"ops"`
	If  []batchCond `json:"if,omitempty"`
}

type batchOp struct {
	Op    string  `json:"op"`
	Key   string  `json:"key"`
	Value *string `json:"value,omitempty"` // base64; required for set, refused for del
}

type batchCond struct {
	Key   string  `json:"key"`
	Index *uint64 `json:"index"` // required; 0 means the key must not exist
}

// Operation names in batch requests.
const (
	opNameSet = "set"
	opNameDel = "del"
)

// decodeStrict decodes one JSON document into v. Refused, as bad_json: an
// empty body, unknown or duplicate member names, member names that do not
// match a field's case exactly, strings that are not valid UTF-8 (raw
// bytes or escaped lone surrogates, which a lenient decoder turns into
// U+FFFD so that different keys collapse into one), and anything after
// the document.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errorf(codeBadJSON, "qs: empty request body, want a JSON object")
	}
	if err := json.Unmarshal(data, v, json.RejectUnknownMembers(true)); err != nil {
		return errorf(codeBadJSON, "qs: bad JSON body: %v", err)
	}
	return nil
}

// decodeBatch decodes and checks a batch request. Errors are bad_json for
// documents that are not a batch request at all, bad_request for invalid
// operations (unknown op, empty key, bad base64, missing value or index).
// Size limits are the store's to check.
func decodeBatch(data []byte) (store.Batch, error) {
	var req batchRequest
	if err := decodeStrict(data, &req); err != nil {
		return store.Batch{}, err
	}
	if len(req.Ops) == 0 {
		return store.Batch{}, errorf(codeBadRequest, `qs: batch has no "ops"`)
	}
	b := store.Batch{Ops: make([]wal.Op, len(req.Ops))}
	for i, o := range req.Ops {
		if o.Key == "" {
			return store.Batch{}, errorf(codeBadRequest, "qs: op %d: empty key", i)
		}
		op := wal.Op{Key: []byte(o.Key)}
		switch o.Op {
		case opNameSet:
			if o.Value == nil {
				return store.Batch{}, errorf(codeBadRequest, `qs: op %d: set without "value"`, i)
			}
			v, err := base64.StdEncoding.DecodeString(*o.Value)
			if err != nil {
				return store.Batch{}, errorf(codeBadRequest, "qs: op %d: value is not standard base64: %v", i, err)
			}
			op.Type, op.Value = wal.OpSet, v
		case opNameDel:
			if o.Value != nil {
				return store.Batch{}, errorf(codeBadRequest, `qs: op %d: del with a "value"`, i)
			}
			op.Type = wal.OpDelete
		default:
			return store.Batch{}, errorf(codeBadRequest, `qs: op %d: unknown op %q (want "set" or "del")`, i, o.Op)
		}
		b.Ops[i] = op
	}
	if len(req.If) > 0 {
		b.Conds = make([]store.Cond, len(req.If))
	}
	for i, c := range req.If {
		if c.Key == "" {
			return store.Batch{}, errorf(codeBadRequest, "qs: condition %d: empty key", i)
		}
		if c.Index == nil {
			return store.Batch{}, errorf(codeBadRequest, `qs: condition %d: no "index" (0 means the key must not exist)`, i)
		}
		b.Conds[i] = store.Cond{Key: []byte(c.Key), Index: *c.Index}
	}
	return b, nil
}
