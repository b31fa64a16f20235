//go:build qsfailpoints

package server

import "testing"

func TestAfterPersistCount(t *testing.T) {
	for _, c := range []struct {
		v  string
		n  int
		ok bool
	}{
		{"raft-after-persist:20", 20, true},
		{"raft-after-persist:1", 1, true},
		{"raft-after-persist:0", 0, false},
		{"raft-after-persist:-3", 0, false},
		{"raft-after-persist:x", 0, false},
		{"raft-after-persist:", 0, false},
		{"", 0, false},
		{"other:5", 0, false},
	} {
		if n, ok := afterPersistCount(c.v); n != c.n || ok != c.ok {
			t.Errorf("afterPersistCount(%q) = %d, %v; want %d, %v", c.v, n, ok, c.n, c.ok)
		}
	}
}

func TestFailpointCountOfEachName(t *testing.T) {
	for _, c := range []struct {
		v, name string
		n       int
		ok      bool
	}{
		{"repl-forwarded:5", "repl-forwarded:", 5, true},
		{"repl-forwarded:0", "repl-forwarded:", 0, false},
		{"repl-forwarded:5", "raft-after-persist:", 0, false},
		{"raft-after-persist:5", "repl-forwarded:", 0, false},
	} {
		if n, ok := failpointCount(c.v, c.name); n != c.n || ok != c.ok {
			t.Errorf("failpointCount(%q, %q) = %d, %v; want %d, %v", c.v, c.name, n, ok, c.n, c.ok)
		}
	}
}

func TestFailpointArmed(t *testing.T) {
	t.Setenv("QS_FAILPOINT", "raft-after-persist:3")
	if failpointAfterPersist(nil) == nil {
		t.Fatal("a qsfailpoints build ignores QS_FAILPOINT")
	}
	if failpointForwarded(nil) != nil {
		t.Fatal("another failpoint armed repl-forwarded")
	}
	t.Setenv("QS_FAILPOINT", "repl-forwarded:3")
	if failpointForwarded(nil) == nil {
		t.Fatal("a qsfailpoints build ignores QS_FAILPOINT=repl-forwarded:3")
	}
	t.Setenv("QS_FAILPOINT", "repl-forwarded:0")
	if failpointForwarded(nil) != nil {
		t.Fatal("repl-forwarded:0 armed a failpoint")
	}
}
