package checker

import (
	"testing"

	"github.com/quicksilver-kv/qs/internal/wal"
)

func entry(i uint64, ops ...wal.Op) wal.Entry { return wal.Entry{Index: i, Ops: ops} }
func set(k, v string) wal.Op                  { return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(v)} }
func del(k string) wal.Op                     { return wal.Op{Type: wal.OpDelete, Key: []byte(k)} }

func TestCheckFindsEachKind(t *testing.T) {
	m := NewModel()
	for _, e := range []wal.Entry{entry(1, set("a", "1")), entry(2, set("b", "x"), del("a")), entry(3), entry(4, set("a", "2"), set("a", "3"))} {
		if err := m.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Apply(entry(9)); err == nil {
		t.Fatal("gap accepted")
	}
	good := []Read{
		{Client: 1, At: 1, Keys: []string{"a", "b"}, Found: []bool{true, false}, Values: [][]byte{[]byte("1"), nil}},
		{Client: 1, At: 3, Keys: []string{"a", "b"}, Found: []bool{false, true}, Values: [][]byte{nil, []byte("x")}},
		{Client: 2, At: 4, Keys: []string{"a"}, Found: []bool{true}, Values: [][]byte{[]byte("3")}},
		{Client: 2, At: 4, Keys: []string{"a", "b"}, Found: []bool{true, true}, Values: [][]byte{[]byte("3"), []byte("x")}, Exact: true, From: "a"},
	}
	if r := Check(m, good); r.Count != 0 || r.Reads != 4 || r.Keys != 7 {
		t.Fatalf("good history: %+v", r)
	}
	bad := []Read{
		{Client: 1, At: 3, Keys: []string{"a"}, Found: []bool{true}, Values: [][]byte{[]byte("1")}},              // value from index 1
		{Client: 1, At: 2, Keys: []string{"b"}, Found: []bool{true}, Values: [][]byte{[]byte("x")}},              // backwards
		{Client: 2, At: 7, Keys: []string{"b"}, Found: []bool{true}, Values: [][]byte{[]byte("x")}},              // future
		{Client: 3, At: 4, Keys: []string{"a"}, Found: []bool{true}, Values: [][]byte{[]byte("3")}, Exact: true}, // misses b
	}
	r := Check(m, bad)
	kinds := map[string]int{}
	for _, v := range r.Violations {
		kinds[v.Kind]++
	}
	if r.Count != 4 || kinds["value"] != 1 || kinds["backwards"] != 1 || kinds["future"] != 1 || kinds["scan"] != 1 {
		t.Fatalf("violations %v", r.Violations)
	}
}
