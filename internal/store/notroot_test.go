package store

import (
	"errors"
	"strings"
	"testing"
)

func TestNotRootError(t *testing.T) {
	known := &NotRootError{Database: "db", Root: []string{"a:1", "b:2"}, Detail: "database db is a replica on this node"}
	unknown := &NotRootError{Database: "db", Detail: "database db is a proxy on this node"}
	for _, err := range []error{known, unknown} {
		if !errors.Is(err, ErrNotRoot) {
			t.Fatalf("%v does not wrap ErrNotRoot", err)
		}
	}
	if msg := known.Error(); !strings.Contains(msg, "database db is a replica on this node") ||
		!strings.Contains(msg, "send writes to its root at http://a:1 or http://b:2") {
		t.Fatalf("known root: %q", msg)
	}
	if msg := unknown.Error(); !strings.Contains(msg, "is not known here") || strings.Contains(msg, "http://") {
		t.Fatalf("unknown root: %q", msg)
	}
}
