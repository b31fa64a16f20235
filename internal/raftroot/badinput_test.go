package raftroot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func counter(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Every kind of bad transport input drops the connection, is counted by
// kind, and leaves the member working.
func TestTransportRefusesBadInput(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	target := c.follower()
	hello := func(h helloMsg) []byte {
		var b bytes.Buffer
		writeFrame(&b, frameHello, h.encode())
		return b.Bytes()
	}
	good := helloMsg{cluster: c.dbid, from: lead.id, to: target.id}
	msg := func(m *pb.Message) []byte {
		body, _ := proto.Marshal(m)
		var b bytes.Buffer
		writeFrame(&b, frameMessage, body)
		return b.Bytes()
	}
	badCRC := hello(good)
	badCRC[len(badCRC)-1] ^= 0xff
	huge := []byte{frameMessage, 0xff, 0xff, 0xff, 0xff}
	garbage := []byte{9, 0, 0, 0, 1, 0, 0, 0, 0, 0}
	var other [16]byte
	copy(other[:], "another-cluster!")
	cases := []struct {
		name, kind string
		data       []byte
	}{
		{"checksum", kindBadFrame, badCRC},
		{"oversized", kindBadFrame, huge},
		{"unknown type", kindBadFrame, garbage},
		{"message before hello", kindBadHello, msg(&pb.Message{From: new(lead.id), To: new(target.id)})},
		{"bad hello", kindBadHello, func() []byte { var b bytes.Buffer; writeFrame(&b, frameHello, []byte("QSRX")); return b.Bytes() }()},
		{"wrong cluster", kindWrongCluster, hello(helloMsg{cluster: other, from: lead.id, to: target.id})},
		{"wrong peer", kindWrongPeer, hello(helloMsg{cluster: c.dbid, from: lead.id, to: target.id + 10})},
		{"unknown peer", kindUnknownPeer, hello(helloMsg{cluster: c.dbid, from: 99, to: target.id})},
		{"malformed message", kindMalformed, append(hello(good), func() []byte {
			var b bytes.Buffer
			writeFrame(&b, frameMessage, []byte{0xff, 0xff, 0xff})
			return b.Bytes()
		}()...)},
		{"forged sender", kindWrongPeer, append(hello(good), msg(&pb.Message{From: new(uint64(99)), To: new(target.id), Type: pb.MessageType_MsgHeartbeat.Enum()})...)},
	}
	for _, tc := range cases {
		before := counter(t, c.metrics.messageErrors, "db", tc.kind)
		conn, err := net.Dial("tcp", target.cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(tc.data)
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err == nil {
			t.Fatalf("%s: the member answered instead of dropping the connection", tc.name)
		}
		if got := counter(t, c.metrics.messageErrors, "db", tc.kind); got != before+1 {
			t.Fatalf("%s: %s errors %v → %v", tc.name, tc.kind, before, got)
		}
	}
	// The member still works and holds the same data.
	c.writeAt(target, put("after", "v"))
	c.waitConverged()
	c.checkDigests()
}

// A corrupt Raft storage refuses to open with ErrCorruptStorage and is
// left as it was; a storage of another member refuses with ErrWrongMember.
func TestCorruptRaftStorage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	var cluster [16]byte
	copy(cluster[:], "corrupt-test-abc")
	d, fresh, err := openDiskStorage(dir, nil, cluster, 1, quiet())
	if err != nil || !fresh {
		t.Fatal(err, fresh)
	}
	hs := &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(1)), Commit: new(uint64(2))}
	ents := []*pb.Entry{
		{Index: new(uint64(1)), Term: new(uint64(1)), Type: pb.EntryType_EntryNormal.Enum()},
		{Index: new(uint64(2)), Term: new(uint64(3)), Type: pb.EntryType_EntryNormal.Enum(), Data: []byte("x")},
	}
	if err := d.save(hs, ents, nil, true); err != nil {
		t.Fatal(err)
	}
	d.close()
	if _, _, err := openDiskStorage(dir, nil, cluster, 2, quiet()); !errors.Is(err, ErrWrongMember) {
		t.Fatalf("other node id: %v", err)
	}
	var other [16]byte
	if _, _, err := openDiskStorage(dir, nil, other, 1, quiet()); !errors.Is(err, ErrWrongMember) {
		t.Fatalf("other cluster: %v", err)
	}
	d, fresh, err = openDiskStorage(dir, nil, cluster, 1, quiet())
	if err != nil || fresh {
		t.Fatalf("reopen: %v fresh %v", err, fresh)
	}
	if got, _ := d.mem.LastIndex(); got != 2 {
		t.Fatalf("last index %d after reopen", got)
	}
	d.close()

	for _, key := range [][]byte{keyHS, entryKey(2)} {
		db, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		v, closer, err := db.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		orig := append([]byte(nil), v...)
		closer.Close()
		bad := append([]byte(nil), orig...)
		bad[len(bad)-1] ^= 0x01
		db.Set(key, bad, pebble.Sync)
		db.Close()
		if _, _, err := openDiskStorage(dir, nil, cluster, 1, quiet()); !errors.Is(err, ErrCorruptStorage) {
			t.Fatalf("corrupt %q: %v", key, err)
		}
		if _, err := ReadState(dir); !errors.Is(err, ErrCorruptStorage) {
			t.Fatalf("ReadState of corrupt %q: %v", key, err)
		}
		db, _ = pebble.Open(dir, &pebble.Options{})
		v, closer, _ = db.Get(key)
		if !bytes.Equal(v, bad) {
			t.Fatalf("corrupt record %q was changed by the failed open", key)
		}
		closer.Close()
		db.Set(key, orig, pebble.Sync) // repair for the next case
		db.Close()
	}
	if _, err := ReadState(dir); err != nil {
		t.Fatal(err)
	}
}

// A member started on a corrupt Raft storage fails with a clear error and
// does not touch its store.
func TestStartOnCorruptStorageFails(t *testing.T) {
	c := newCluster(t, 1, nil)
	m := c.members[1]
	c.writeAt(m, put("k", "v"))
	h0, _ := m.st.Head()
	m.node.Stop()
	db, err := pebble.Open(m.cfg.Dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Set(keyHS, []byte{0, 0, 0, 0, 1, 2, 3}, pebble.Sync)
	db.Close()
	_, err = Start(m.cfg, m.st)
	if !errors.Is(err, ErrCorruptStorage) {
		t.Fatalf("start on corrupt storage: %v", err)
	}
	if h, _ := m.st.Head(); h != h0 {
		t.Fatal("the store changed")
	}
	m.node = nil
	m.rs.Shutdown(context.Background())
	m.st.Close()
}

func TestCommandRoundTrip(t *testing.T) {
	c := command{time: 42, batch: store.Batch{
		Ops:   []wal.Op{{Type: wal.OpSet, Key: []byte("a"), Value: []byte("1")}, {Type: wal.OpDelete, Key: []byte("b")}},
		Conds: []store.Cond{{Key: []byte("a"), Index: 7}, {Key: []byte("c"), Index: 0}},
		ID:    []byte("id-1"),
	}}
	c.id[0] = 9
	got, err := decodeCommand(c.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.id != c.id || got.time != 42 || got.heartbeat || len(got.batch.Ops) != 2 || string(got.batch.Ops[0].Value) != "1" ||
		len(got.batch.Conds) != 2 || got.batch.Conds[0].Index != 7 || string(got.batch.ID) != "id-1" {
		t.Fatalf("round trip: %+v", got)
	}
	hb := command{time: 5, heartbeat: true}
	if got, err := decodeCommand(hb.encode()); err != nil || !got.heartbeat || got.time != 5 || got.batch.ID != nil {
		t.Fatalf("heartbeat: %+v %v", got, err)
	}
}

// FuzzDecodeCommand: any bytes decode to a command or errMalformedCommand,
// never a panic; a decoded command survives an encode/decode round trip.
func FuzzDecodeCommand(f *testing.F) {
	c := command{time: 1, batch: store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k"), Value: []byte("v")}},
		Conds: []store.Cond{{Key: []byte("k"), Index: 3}}, ID: []byte("x")}}
	f.Add(c.encode())
	f.Add((&command{heartbeat: true}).encode())
	f.Add([]byte{1})
	f.Add(binary.AppendUvarint([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1<<40))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCommand(b)
		if err != nil {
			if !errors.Is(err, errMalformedCommand) {
				t.Fatalf("error %v is not errMalformedCommand", err)
			}
			return
		}
		// Encodings need not be canonical; what a member decodes must
		// survive a round trip.
		c2, err := decodeCommand(c.encode())
		if err != nil || c2.id != c.id || c2.time != c.time || c2.heartbeat != c.heartbeat ||
			len(c2.batch.Ops) != len(c.batch.Ops) || len(c2.batch.Conds) != len(c.batch.Conds) || !bytes.Equal(c2.batch.ID, c.batch.ID) {
			t.Fatalf("round trip of a decoded command: %+v vs %+v (%v)", c2, c, err)
		}
	})
}

// A received snapshot replaces the whole stored log: entries after it from
// an older term must not come back at the next start.
func TestSnapshotReplacesStoredLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	var cluster [16]byte
	d, _, err := openDiskStorage(dir, nil, cluster, 1, quiet())
	if err != nil {
		t.Fatal(err)
	}
	var ents []*pb.Entry
	for i := uint64(1); i <= 10; i++ {
		ents = append(ents, &pb.Entry{Index: new(i), Term: new(uint64(1)), Type: pb.EntryType_EntryNormal.Enum()})
	}
	if err := d.save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(3))}, ents, nil, true); err != nil {
		t.Fatal(err)
	}
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(2)),
		ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	if err := d.save(&pb.HardState{Term: new(uint64(2)), Commit: new(uint64(5))}, nil, snap, true); err != nil {
		t.Fatal(err)
	}
	d.close()
	st, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotIndex != 5 || st.Last != 5 || st.FirstIndex != 6 {
		t.Fatalf("after a snapshot at 5 over entries 1..10: %+v", st)
	}
}

func TestDecodeEntries(t *testing.T) {
	c := command{time: 7, batch: put("k", "v")}
	c.id[0] = 1
	cc, _ := proto.Marshal(&pb.ConfChange{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: new(uint64(4)), Context: []byte("h:1")})
	normal, confType := pb.EntryType_EntryNormal, pb.EntryType_EntryConfChange
	ents := []*pb.Entry{
		{Index: new(uint64(10)), Type: &normal, Data: c.encode()},
		{Index: new(uint64(11)), Type: &normal},
		{Index: new(uint64(12)), Type: &confType, Data: cc},
		{Index: new(uint64(13)), Type: &normal, Data: []byte{1, 2, 3}},
		{Index: new(uint64(14)), Type: &confType, Data: []byte{0xff}},
	}
	d := decodeEntries(ents)
	if len(d.cmds) != 5 || len(d.ids) != 5 || len(d.confs) != 1 || len(d.bad) != 2 {
		t.Fatalf("decoded %d commands, %d ids, %d conf changes, %d bad", len(d.cmds), len(d.ids), len(d.confs), len(d.bad))
	}
	for i, rc := range d.cmds {
		if rc.RaftIndex != uint64(10+i) {
			t.Fatalf("command %d has raft index %d", i, rc.RaftIndex)
		}
	}
	if d.ids[0] != c.id || d.cmds[0].Time != 7 || len(d.cmds[0].Batch.Ops) != 1 {
		t.Fatalf("command: %+v", d.cmds[0])
	}
	for _, i := range []int{1, 2, 3, 4} {
		if len(d.cmds[i].Batch.Ops) != 0 || d.cmds[i].Heartbeat || d.ids[i] != ([16]byte{}) {
			t.Fatalf("entry %d should only advance the raft index: %+v", i, d.cmds[i])
		}
	}
}
