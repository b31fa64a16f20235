//go:build !cgo

package ctrim

import "testing"

func TestNothingToTrimWithoutCgo(t *testing.T) {
	if Available() {
		t.Fatal("Available without cgo")
	}
	if n := Trim(); n != 0 {
		t.Fatalf("Trim released %d bytes without cgo", n)
	}
}
