package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/tree"
)

func TestDecodeDescription(t *testing.T) {
	report, err := tree.Encode(tree.Report{Node: tree.Node{Name: "member-2", Role: "root", State: "follower",
		Children: []tree.Node{{Name: "r", Role: "replica"}}}})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(memberDescription{HTTP: "10.0.0.2:7380", Tree: report})
	d, n, err := decodeDescription(good)
	if err != nil || d.HTTP != "10.0.0.2:7380" || n.Name != "member-2" || len(n.Children) != 1 {
		t.Fatalf("good description: %+v %+v %v", d, n, err)
	}
	long, _ := json.Marshal(memberDescription{HTTP: strings.Repeat("h", 300), Tree: report})
	noName, _ := json.Marshal(memberDescription{HTTP: "a:1", Tree: json.RawMessage(`{"v":1,"node":{"role":"root"}}`)})
	for name, b := range map[string][]byte{
		"not JSON": []byte("member 2"), "empty": nil, "long address": long, "invalid tree": noName,
		"no tree": []byte(`{"http":"a:1"}`),
	} {
		if _, _, err := decodeDescription(b); !errors.Is(err, tree.ErrInvalid) {
			t.Errorf("%s: %v, want tree.ErrInvalid", name, err)
		}
	}
}

func TestRaftStateNames(t *testing.T) {
	for in, want := range map[string]string{"StateLeader": "leader", "StateFollower": "follower",
		"StateCandidate": "candidate", "StatePreCandidate": "pre_candidate", "": ""} {
		if got := raftState(in); got != want {
			t.Errorf("%q → %q, want %q", in, got, want)
		}
	}
}
