package pgbridge

import (
	"context"
	"fmt"

	"github.com/quicksilver-kv/qs/client"
)

// Current reads what qs holds now: the value of a key (nil when absent)
// and the keys under a prefix.
type Current interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// Ops turns a transaction's changes into the operations of one qs batch:
// one operation per key, the last change to it winning, in the order keys
// were first changed. Rows with unchanged large values take them from the
// row as the transaction left it so far, else from qs (cur); a truncate
// deletes every key under prefix that qs holds.
func Ops(ctx context.Context, changes []Change, prefix string, cur Current) ([]client.Op, error) {
	var order []string
	final := map[string]client.Op{}
	put := func(op client.Op) {
		if _, ok := final[op.Key]; !ok {
			order = append(order, op.Key)
		}
		final[op.Key] = op
	}
	for _, c := range changes {
		switch {
		case c.Truncate:
			keys, err := cur.Keys(ctx, prefix)
			if err != nil {
				return nil, err
			}
			for _, k := range keys {
				put(client.Op{Key: k, Delete: true})
			}
			for k := range final {
				put(client.Op{Key: k, Delete: true})
			}
		case c.Delete:
			put(client.Op{Key: c.Key, Delete: true})
		case c.Value != nil:
			put(client.Op{Key: c.Key, Value: c.Value})
		default:
			var prev []byte
			if op, ok := final[c.Key]; ok {
				if !op.Delete {
					prev = op.Value
				}
			} else {
				v, err := cur.Get(ctx, c.Key)
				if err != nil {
					return nil, err
				}
				prev = v
			}
			v, err := RowJSON(c.Cols, c.Unresolved, prev)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrDecode, c.Key, err)
			}
			put(client.Op{Key: c.Key, Value: v})
		}
	}
	out := make([]client.Op, 0, len(order))
	for _, k := range order {
		out = append(out, final[k])
	}
	return out, nil
}
