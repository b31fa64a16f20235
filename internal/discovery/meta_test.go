package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func sampleMeta() Meta {
	return Meta{Process: [16]byte{7, 7}, DC: "ams", HTTP: "10.0.0.1:7380", Repl: "10.0.0.1:7390", DBs: []DBMeta{
		{Name: "default", ID: [16]byte{1, 2, 3}, Role: RoleReplica, Applied: 1 << 40, Depth: 2, Children: 3, MaxChildren: 16, Path: []uint64{NodeID("a"), NodeID("root")}},
		{Name: "dns", ID: [16]byte{9}, Role: RoleRoot},
		{Name: "edge", ID: [16]byte{5}, Role: RoleRelay},
		{Name: "web", ID: [16]byte{6}, Role: RoleRelayClient},
	}}
}

func TestMetaRoundTrip(t *testing.T) {
	m := sampleMeta()
	b, dropped := m.Encode()
	if dropped != 0 || len(b) > MetaMaxSize {
		t.Fatalf("encoded %d bytes, %d dropped", len(b), dropped)
	}
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded %+v, want %+v", got, m)
	}
	if got, err := DecodeMeta(nil); err != nil || !reflect.DeepEqual(got, Meta{}) {
		t.Fatalf("empty meta: %+v, %v", got, err)
	}
}

// TestMetaKeepsUnderLimit: databases that do not fit are left out, never
// cut in half, and the rest still decodes.
func TestMetaKeepsUnderLimit(t *testing.T) {
	m := Meta{DC: "x", Repl: "127.0.0.1:1"}
	for i := range 20 {
		m.DBs = append(m.DBs, DBMeta{Name: fmt.Sprintf("database-%02d", i), Role: RoleReplica, Depth: 3, Path: []uint64{1, 2, 3}})
	}
	b, dropped := m.Encode()
	if len(b) > MetaMaxSize || dropped == 0 {
		t.Fatalf("%d bytes, %d dropped", len(b), dropped)
	}
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.DBs)+dropped != 20 {
		t.Fatalf("%d databases kept + %d dropped, want 20", len(got.DBs), dropped)
	}
}

func TestDecodeMetaRejectsBadInput(t *testing.T) {
	good, _ := sampleMeta().Encode()
	roleAt := bytes.Index(good, []byte("default")) + len("default") + 16
	pid := make([]byte, 16)
	for name, b := range map[string][]byte{
		"version":       append([]byte{9}, good[1:]...),
		"truncated":     good[:len(good)-3],
		"trailing":      append(append([]byte{}, good...), 0),
		"too long":      append(append([]byte{}, good...), make([]byte, MetaMaxSize)...),
		"bad role":      func() []byte { c := bytes.Clone(good); c[roleAt] = 7; return c }(),
		"no process":    {metaVersion, 0, 0},
		"huge count":    append(append([]byte{metaVersion}, pid...), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"bad varint":    append(append([]byte{metaVersion}, pid...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		"string beyond": append(append([]byte{metaVersion}, pid...), 50, 'a'),
		"path too long": append(append([]byte{metaVersion}, pid...), append([]byte{0, 0, 0, 1, 1, 'x'}, append(make([]byte, 16), 1, 0, 1, 0, 0, 200)...)...),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeMeta(b); !errors.Is(err, ErrBadMeta) {
				t.Fatalf("DecodeMeta = %v, want ErrBadMeta", err)
			}
		})
	}
}

func TestDecodeCoordinateRejectsBadInput(t *testing.T) {
	good := encodeCoordinate(coordinate.NewCoordinate(coordinate.DefaultConfig()))
	if _, err := decodeCoordinate(good); err != nil {
		t.Fatal(err)
	}
	nan := bytes.Clone(good)
	copy(nan[1:], []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	for name, b := range map[string][]byte{"empty": nil, "short": good[:10], "long": append(bytes.Clone(good), 0), "zero dims": {0}, "nan": nan} {
		if _, err := decodeCoordinate(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"no name":          {Bind: "127.0.0.1:0"},
		"bad address":      {NodeName: "a", Bind: "127.0.0.1"},
		"bad port":         {NodeName: "a", Bind: "127.0.0.1:x"},
		"open without key": {NodeName: "a", Bind: "0.0.0.0:7946"},
		"lan without key":  {NodeName: "a", Bind: "10.1.2.3:7946"},
		"bad key size":     {NodeName: "a", Bind: "127.0.0.1:0", Key: make([]byte, 20)},
		"negative gossip":  {NodeName: "a", Bind: "127.0.0.1:0", GossipInterval: -1},
		"negative relays":  {NodeName: "a", Bind: "127.0.0.1:0", RelaysPerDC: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, c := range map[string]Config{
		"loopback":     {NodeName: "a", Bind: "127.0.0.1:0"},
		"localhost":    {NodeName: "a", Bind: "localhost:0"},
		"open, keyed":  {NodeName: "a", Bind: "0.0.0.0:0", Key: make([]byte, 32)},
		"open, unsafe": {NodeName: "a", Bind: "0.0.0.0:0", Insecure: true},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A member whose meta cannot be read is counted and left out of Members.
func TestBadMetaCounted(t *testing.T) {
	m := NewMetrics()
	coord, err := coordinate.NewClient(coordinate.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := &Overlay{log: slog.New(slog.DiscardHandler), m: m, coord: coord}
	o.mu.nodes, o.mu.misses = map[string]node{}, map[string]int{}
	d := &delegate{o: o}
	d.remember(&memberlist.Node{Name: "x", Addr: net.IPv4(127, 0, 0, 1), Port: 7946, Meta: []byte{42}})
	d.remember(&memberlist.Node{Name: "y", Addr: net.IPv4(127, 0, 0, 1), Port: 7947})
	if got := testutil.ToFloat64(m.badMeta); got != 1 {
		t.Fatalf("bad_meta_total grew by %v, want 1", got)
	}
	if ms := o.Members(); len(ms) != 1 || ms[0].Name != "y" || ms[0].Gossip != "127.0.0.1:7947" {
		t.Fatalf("members %+v, want y alone", ms)
	}
}

// TestAppliedRefresh: every 10 s in a small overlay; slower in a large
// one so that the overlay carries at most 5 refreshes a second; never
// slower than once a minute.
func TestAppliedRefresh(t *testing.T) {
	for _, c := range []struct {
		members int
		want    time.Duration
	}{
		{0, 10 * time.Second}, {1, 10 * time.Second}, {50, 10 * time.Second},
		{51, 10200 * time.Millisecond}, {200, 40 * time.Second},
		{300, time.Minute}, {100000, time.Minute},
	} {
		if got := AppliedRefresh(c.members); got != c.want {
			t.Errorf("AppliedRefresh(%d) = %v, want %v", c.members, got, c.want)
		}
	}
	for n := 1; n <= 300; n++ {
		if rate := float64(n) / AppliedRefresh(n).Seconds(); rate > 5 {
			t.Fatalf("%d members refresh %.2f times a second in all, more than 5", n, rate)
		}
	}
}
