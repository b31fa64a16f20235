package tree

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func chain(depth int) Node {
	n := Node{Name: fmt.Sprintf("n%d", depth), Role: "replica"}
	if depth > 0 {
		n.Children = []Node{chain(depth - 1)}
	}
	return n
}

func wide(n int) Node {
	root := Node{Name: "root", Role: "root"}
	for i := 0; i < n; i++ {
		root.Children = append(root.Children, Node{Name: fmt.Sprintf("c%04d", i), Role: "replica"})
	}
	return root
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := Report{Node: Node{Name: "mid", Role: "replica", State: "streaming", Source: "10.0.0.1:7381", AppliedIndex: 42, LagSeconds: 0.5,
		Children: []Node{{Name: "leaf", Role: "proxy", AppliedIndex: 41}}}, Reads: []Sample{{Hash: 1<<63 + 5, Count: 3}}, Sampled: 3}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != ReportVersion || got.Node.Children[0].Name != "leaf" || got.Reads[0] != r.Reads[0] || got.Node.LagSeconds != 0.5 {
		t.Fatalf("round trip: %+v", got)
	}
	// A newer child's unknown fields are ignored.
	if _, err := Decode([]byte(`{"v":7,"future":1,"node":{"name":"x","role":"replica","zone":"eu"}}`)); err != nil {
		t.Errorf("report of a newer version: %v", err)
	}
}

func TestDecodeRefusesBadReports(t *testing.T) {
	deep := Report{Version: 1, Node: chain(MaxDepth + 1)}
	big := Report{Version: 1, Node: wide(MaxNodes)}
	manyReads := Report{Version: 1, Node: Node{Name: "x", Role: "replica"}, Reads: make([]Sample, MaxReads+1)}
	for name, doc := range map[string]string{
		"not json":              `{"v":1,`,
		"no version":            `{"node":{"name":"x","role":"replica"}}`,
		"no name":               `{"v":1,"node":{"role":"replica"}}`,
		"no role":               `{"v":1,"node":{"name":"x"}}`,
		"long name":             `{"v":1,"node":{"name":"` + strings.Repeat("a", MaxName+1) + `","role":"replica"}}`,
		"long role":             `{"v":1,"node":{"name":"x","role":"` + strings.Repeat("r", MaxWord+1) + `"}}`,
		"long source":           `{"v":1,"node":{"name":"x","role":"replica","source":"` + strings.Repeat("s", MaxName+1) + `"}}`,
		"lag ahead of all time": `{"v":1,"node":{"name":"x","role":"replica","lag_seconds":-1e10}}`,
		"lag beyond all time":   `{"v":1,"node":{"name":"x","role":"replica","lag_seconds":1e308}}`,
		"negative cut":          `{"v":1,"node":{"name":"x","role":"replica","truncated":-1}}`,
		"short sample":          `{"v":1,"node":{"name":"x","role":"replica"},"reads":[[1]]}`,
		"long sample":           `{"v":1,"node":{"name":"x","role":"replica"},"reads":[[1,2,3]]}`,
		"child no name":         `{"v":1,"node":{"name":"x","role":"replica","children":[{"role":"replica"}]}}`,
		"deep":                  mustJSON(t, deep),
		"too many nodes":        mustJSON(t, big),
		"too many reads":        mustJSON(t, manyReads),
		"negative index":        `{"v":1,"node":{"name":"x","role":"replica","applied_index":-1}}`,
		"children object":       `{"v":1,"node":{"name":"x","role":"replica","children":{}}}`,
	} {
		if _, err := Decode([]byte(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Encode(big); !errors.Is(err, ErrInvalid) {
		t.Errorf("encode of too many nodes: %v", err)
	}
}

func mustJSON(t *testing.T, r Report) string {
	t.Helper()
	r.Version = 1
	var b strings.Builder
	b.WriteString(`{"v":1,"node":`)
	b.WriteString(nodeJSON(r.Node))
	if len(r.Reads) > 0 {
		b.WriteString(`,"reads":[`)
		for i := range r.Reads {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("[1,1]")
		}
		b.WriteString("]")
	}
	b.WriteString("}")
	return b.String()
}

func nodeJSON(n Node) string {
	s := fmt.Sprintf(`{"name":%q,"role":%q`, n.Name, n.Role)
	if len(n.Children) > 0 {
		s += `,"children":[`
		for i, c := range n.Children {
			if i > 0 {
				s += ","
			}
			s += nodeJSON(c)
		}
		s += "]"
	}
	return s + "}"
}

// A lag below 0 (the node's last entry is dated in its future: a clock is
// wrong) travels as it is and is flagged unknown in the flattened tree,
// never shown as 0.
func TestNegativeLagIsReportedAsUnknown(t *testing.T) {
	r := Report{Node: Node{Name: "mid", Role: "replica", LagSeconds: 0.5,
		Children: []Node{{Name: "leaf", Role: "replica", LagSeconds: -3600}}}}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if lag := got.Node.Children[0].LagSeconds; lag != -3600 {
		t.Fatalf("negative lag decoded as %v", lag)
	}
	rows := Flatten(got.Node)
	if rows[0].LagUnknown || !rows[1].LagUnknown || rows[1].LagSeconds != -3600 {
		t.Fatalf("rows %+v: want the leaf's lag unknown at -3600 s, the mid's known", rows)
	}
	b, err = json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var doc []map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc[1]["lag_unknown"] != true || doc[1]["lag_seconds"] != -3600.0 {
		t.Fatalf("JSON of the leaf: %v", doc[1])
	}
	if _, ok := doc[0]["lag_unknown"]; ok {
		t.Fatalf("JSON of a node with a known lag says unknown: %v", doc[0])
	}
}

func TestCutKeepsNearestAndCountsTheRest(t *testing.T) {
	n := wide(10)
	n.Children[0].Children = []Node{{Name: "g0", Role: "replica", Truncated: 4}}
	if got := Size(&n); got != 16 {
		t.Fatalf("size %d, want 16", got)
	}
	c := Cut(n, 5, MaxDepth)
	if len(c.Children) != 4 || c.Truncated != 6 || len(c.Children[0].Children) != 0 || c.Children[0].Truncated != 5 {
		t.Fatalf("cut to 5: %d children, truncated %d", len(c.Children), c.Truncated)
	}
	if Size(&c) != Size(&n) {
		t.Errorf("cut changed the size: %d, want %d", Size(&c), Size(&n))
	}
	if len(n.Children) != 10 || len(n.Children[0].Children) != 1 {
		t.Error("Cut changed its argument")
	}
	d := Cut(chain(5), MaxNodes, 2)
	if rows := Flatten(d); len(rows) != 3 || rows[2].Truncated != 3 {
		t.Errorf("cut to depth 2: %+v", rows)
	}
	if all := Cut(chain(5), MaxNodes, MaxDepth); Size(&all) != 6 || all.Truncated != 0 {
		t.Error("a tree within the bounds was cut")
	}
}

func TestFlattenOrderAndDepth(t *testing.T) {
	n := Node{Name: "r", Role: "root", Children: []Node{
		{Name: "a", Role: "replica", Children: []Node{{Name: "a1", Role: "proxy"}}},
		{Name: "b", Role: "replica"}}}
	var got []string
	for _, r := range Flatten(n) {
		got = append(got, fmt.Sprintf("%s/%d/%s", r.Name, r.Depth, r.Parent))
	}
	if want := "r/0/ a/1/r a1/2/a b/1/r"; strings.Join(got, " ") != want {
		t.Errorf("flatten: %v, want %s", got, want)
	}
}

func TestRegistryReplacesAndForgets(t *testing.T) {
	reg := NewRegistry(10 * time.Second)
	t0 := time.Unix(1000, 0)
	reg.Put("db", "child-1", Node{Name: "b", Role: "replica", AppliedIndex: 1}, t0)
	reg.Put("db", "child-1", Node{Name: "b", Role: "replica", AppliedIndex: 2}, t0.Add(time.Second))
	reg.Put("db", "child-2", Node{Name: "a", Role: "proxy"}, t0.Add(2*time.Second))
	reg.Put("other", "child-3", Node{Name: "z", Role: "replica"}, t0)
	c := reg.Children("db", t0.Add(3*time.Second))
	if len(c) != 2 || c[0].Name != "a" || c[1].AppliedIndex != 2 {
		t.Fatalf("children: %+v", c)
	}
	// child-1 last reported at t0+1s: gone 10s later; child-2 still there.
	c = reg.Children("db", t0.Add(11500*time.Millisecond))
	if len(c) != 1 || c[0].Name != "a" {
		t.Fatalf("after child-1's TTL: %+v", c)
	}
	self := reg.Compose("db", Node{Name: "me", Role: "replica"}, t0.Add(13*time.Second))
	if len(self.Children) != 0 {
		t.Errorf("after every TTL: %+v", self.Children)
	}
	if len(reg.Children("other", t0.Add(time.Second))) != 1 {
		t.Error("another database's child lost")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":{"name":"x","role":"replica","children":[{"name":"y","role":"proxy"}]},"reads":[[1,2]]}`))
	f.Add([]byte(`{"v":1,"node":{"name":"x","role":"root","lag_seconds":1e308}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		// A valid report stays valid once encoded again, and is bounded.
		if _, err := Encode(r); err != nil {
			t.Fatalf("decoded report does not encode: %v", err)
		}
		if Size(&r.Node) < 1 || len(Flatten(r.Node)) > MaxNodes {
			t.Fatalf("decoded report out of bounds")
		}
	})
}

func TestClusterPutsTheLeaderOnTop(t *testing.T) {
	m1 := Member{ID: 1, Node: Node{Name: "m1", Role: "root", State: "follower", Children: []Node{{Name: "r1", Role: "replica"}}}}
	m2 := Member{ID: 2, Node: Node{Name: "m2", Role: "root", State: "leader", Children: []Node{{Name: "r2", Role: "replica"}}}}
	m3 := Member{ID: 3, Node: Node{Name: "m3", Role: "root", State: "follower"}}
	for _, self := range []Member{m1, m2, m3} {
		var peers []Member
		for _, m := range []Member{m3, m2, m1} {
			if m.ID != self.ID {
				peers = append(peers, m)
			}
		}
		rows := Flatten(Cluster(self, peers, 2))
		var got []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%s/%d/%s", r.Name, r.Depth, r.Parent))
		}
		want := "m2/0/ m1/1/m2 r1/2/m1 m3/1/m2 r2/1/m2"
		if strings.Join(got, " ") != want {
			t.Fatalf("asked of %s: %v, want %s", self.Node.Name, got, want)
		}
	}
}

func TestClusterWithoutLeaderShowsSelfOnTop(t *testing.T) {
	self := Member{ID: 3, Node: Node{Name: "m3", Role: "root", State: "candidate"}}
	peers := []Member{{ID: 1, Node: Node{Name: "m1", Role: "root", State: "unreachable"}}}
	for _, leader := range []uint64{0, 7} { // none, or one not among the members
		rows := Flatten(Cluster(self, peers, leader))
		if len(rows) != 2 || rows[0].Name != "m3" || rows[1].Name != "m1" || rows[1].Parent != "m3" {
			t.Fatalf("leader %d: %+v", leader, rows)
		}
	}
}

func TestClusterIsCutToTheBounds(t *testing.T) {
	big := Node{Name: "m2", Role: "root"}
	for i := range MaxNodes {
		big.Children = append(big.Children, Node{Name: fmt.Sprint("r", i), Role: "replica"})
	}
	n := Cluster(Member{ID: 1, Node: Node{Name: "m1", Role: "root", State: "leader"}}, []Member{{ID: 2, Node: big}}, 1)
	if Size(&n) != MaxNodes+2 || len(Flatten(n)) != MaxNodes {
		t.Fatalf("size %d, %d rows", Size(&n), len(Flatten(n)))
	}
	if r := (Report{Version: 1, Node: n}); r.Validate() != nil {
		t.Fatalf("cut cluster tree invalid: %v", r.Validate())
	}
}
