package server

import (
	"encoding/json"
	"testing"

	"github.com/quicksilver-kv/qs/internal/tree"
)

// A replica whose last entry is dated in its future reports its lag below
// 0, as it is: the tree it sends its source, and the tree JSON the status
// page reads, say unknown, never 0.
func TestNodeLineKeepsNegativeLag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     map[string]any
		want   float64
		absent bool
	}{
		{"known", map[string]any{"role": "replica", "lag_seconds": 0.75}, 0.75, false},
		{"unknown", map[string]any{"role": "replica", "lag_seconds": -86400.0}, -86400, false},
		{"beyond the bound", map[string]any{"role": "replica", "lag_seconds": -1e300}, -tree.MaxLagSeconds, false},
		{"root without status", nil, 0, true},
	} {
		n := nodeOf("r1", 7, tc.st)
		if n.LagSeconds != tc.want {
			t.Errorf("%s: lag %v, want %v", tc.name, n.LagSeconds, tc.want)
		}
		b, err := tree.Encode(tree.Report{Node: n})
		if err != nil {
			t.Fatalf("%s: report refused: %v", tc.name, err)
		}
		r, err := tree.Decode(b)
		if err != nil {
			t.Fatalf("%s: report refused by its source: %v", tc.name, err)
		}
		rows, err := json.Marshal(tree.Flatten(r.Node))
		if err != nil {
			t.Fatal(err)
		}
		var doc []map[string]any
		if err := json.Unmarshal(rows, &doc); err != nil {
			t.Fatal(err)
		}
		if doc[0]["lag_seconds"] != tc.want || (doc[0]["lag_unknown"] == true) != (tc.want < 0) {
			t.Errorf("%s: tree JSON %v", tc.name, doc[0])
		}
	}
}
