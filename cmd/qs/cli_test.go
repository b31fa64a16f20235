package main

import "testing"

func TestValueOutput(t *testing.T) {
	for _, c := range []struct {
		in       string
		terminal bool
		want     string
	}{
		{"hello", false, "hello"},
		{"hello", true, "hello\n"},
		{"hello\n", true, "hello\n"},
		{"", true, ""},
		{"a\x00b", false, "a\x00b"},
	} {
		if got := string(valueOutput([]byte(c.in), c.terminal)); got != c.want {
			t.Errorf("valueOutput(%q, %v) = %q, want %q", c.in, c.terminal, got, c.want)
		}
	}
}

func TestVersionLine(t *testing.T) {
	if got, want := versionLine("1.2.3", "go1.26.0", "linux/amd64", "0123456789ab"), "qs 1.2.3 (go1.26.0, linux/amd64, commit 0123456789ab)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := versionLine("1.2.3", "go1.26.0", "linux/amd64", ""), "qs 1.2.3 (go1.26.0, linux/amd64)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
