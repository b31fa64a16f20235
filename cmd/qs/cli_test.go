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

func TestIsServeUnder(t *testing.T) {
	for _, c := range []struct {
		args []string
		cwd  string
		want bool
	}{
		{[]string{"/bin/qs", "serve", "--data", "qs-dev/root"}, "/home/u", true},
		{[]string{"/bin/qs", "serve", "--data", "/home/u/qs-dev/leaf1", "--http", "x"}, "/", true},
		{[]string{"/bin/qs", "serve", "--data", "/home/u/qs-dev"}, "/", false},
		{[]string{"/bin/qs", "serve", "--data", "/home/u/other"}, "/", false},
		{[]string{"/bin/qs", "serve", "--data", "../qs-dev/root"}, "/home/u/x", true},
		{[]string{"/bin/qs", "dev", "--data", "qs-dev/root"}, "/home/u", false},
		{[]string{"/usr/bin/sleep", "100"}, "/home/u", false},
	} {
		if got := isServeUnder(c.args, c.cwd, "/home/u/qs-dev"); got != c.want {
			t.Errorf("isServeUnder(%q, %q) = %v, want %v", c.args, c.cwd, got, c.want)
		}
	}
}
