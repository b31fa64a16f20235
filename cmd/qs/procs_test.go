package main

import "testing"

func TestServeProcs(t *testing.T) {
	for _, c := range []struct {
		def  int
		env  string
		want int
	}{
		{2, "", minServeProcs}, // a small machine gets more Ps than cores
		{1, "", minServeProcs},
		{32, "", 32}, // a large one keeps the runtime's default
		{2, "2", 2},  // GOMAXPROCS in the environment wins
		{3, "3", 3},
	} {
		if got := serveProcs(c.def, c.env); got != c.want {
			t.Errorf("serveProcs(%d, %q) = %d, want %d", c.def, c.env, got, c.want)
		}
	}
}
