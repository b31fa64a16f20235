package etcdbridge

import (
	"reflect"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quicksilver-kv/qs/client"
)

func ev(typ mvccpb.Event_EventType, key, value string, rev int64) *clientv3.Event {
	kv := &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}
	if value != "-" {
		kv.Value = []byte(value)
	}
	return &clientv3.Event{Type: typ, Kv: kv}
}

func TestGroupAndOps(t *testing.T) {
	events := []*clientv3.Event{
		ev(mvccpb.PUT, "app/a", "1", 5),
		ev(mvccpb.PUT, "app/b", "2", 6), // one transaction: three events of revision 6
		ev(mvccpb.DELETE, "app/a", "-", 6),
		ev(mvccpb.PUT, "app/b", "3", 6),
		ev(mvccpb.PUT, "app/e", "-", 7), // an empty value stays a set
	}
	revs := Group(events)
	if len(revs) != 3 || revs[0].Rev != 5 || revs[1].Rev != 6 || len(revs[1].Events) != 3 || revs[2].Rev != 7 {
		t.Fatalf("Group: %+v", revs)
	}
	got := Ops(revs[1], "app/", "cfg/")
	want := []client.Op{{Key: "cfg/b", Value: []byte("3")}, {Key: "cfg/a", Delete: true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Ops = %+v, want %+v", got, want)
	}
	if got := Ops(revs[2], "app/", "app/"); len(got) != 1 || got[0].Value == nil || len(got[0].Value) != 0 || got[0].Delete {
		t.Fatalf("empty value: %+v", got)
	}
	if Group(nil) != nil {
		t.Fatal("Group(nil)")
	}
}
