package etcdbridge

import (
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quicksilver-kv/qs/client"
)

// Rev is the changes of one etcd revision.
type Rev struct {
	Rev    int64
	Events []*clientv3.Event
}

// Group splits watch events (in revision order) by revision: each group is
// one etcd put, delete or transaction.
func Group(events []*clientv3.Event) []Rev {
	var out []Rev
	for _, ev := range events {
		r := ev.Kv.ModRevision
		if n := len(out); n > 0 && out[n-1].Rev == r {
			out[n-1].Events = append(out[n-1].Events, ev)
			continue
		}
		out = append(out, Rev{Rev: r, Events: []*clientv3.Event{ev}})
	}
	return out
}

// MapKey maps an etcd key under from to its qs key under to.
func MapKey(key, from, to string) string {
	return to + strings.TrimPrefix(key, from)
}

// Ops turns one revision's events into the operations of one qs batch,
// the last event of a key winning (a transaction may touch a key twice).
func Ops(r Rev, from, to string) []client.Op {
	idx := map[string]int{}
	var ops []client.Op
	for _, ev := range r.Events {
		op := client.Op{Key: MapKey(string(ev.Kv.Key), from, to)}
		if ev.Type == mvccpb.DELETE {
			op.Delete = true
		} else {
			op.Value = ev.Kv.Value
			if op.Value == nil {
				op.Value = []byte{}
			}
		}
		if i, ok := idx[op.Key]; ok {
			ops[i] = op
			continue
		}
		idx[op.Key] = len(ops)
		ops = append(ops, op)
	}
	return ops
}
