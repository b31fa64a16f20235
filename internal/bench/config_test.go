package bench

import (
	"flag"
	"reflect"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
		err  string
	}{
		{in: "mc=127.0.0.1:11211", want: Target{Name: "mc", Memcache: "127.0.0.1:11211"}},
		{in: "qs=127.0.0.1:1,http=127.0.0.1:2", want: Target{Name: "qs", Memcache: "127.0.0.1:1", HTTP: "127.0.0.1:2"}},
		{in: "qs=,http=http://localhost:2", want: Target{Name: "qs", HTTP: "localhost:2"}},
		{in: "127.0.0.1:11211", err: "want name="},
		{in: "mc=", err: "neither"},
		{in: "mc=127.0.0.1", err: "missing port"},
		{in: "mc=127.0.0.1:1,grpc=x:2", err: "unknown"},
		{in: "mc=127.0.0.1:1,http=a:1,http=b:2", err: "repeated"},
	} {
		got, err := ParseTarget(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v", tc.in, got, err)
		}
		if back, err := ParseTarget(got.String()); err != nil || back != got {
			t.Errorf("%q: String() %q does not parse back: %+v %v", tc.in, got.String(), back, err)
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:1": true, "127.1.2.3:1": true, "[::1]:1": true, "localhost:1": true,
		"10.0.0.1:1": false, "example.com:1": false, "0.0.0.0:1": false, ":1": false,
	} {
		err := Target{Name: "x", Memcache: addr}.check(false)
		if (err == nil) != ok {
			t.Errorf("%s: err %v", addr, err)
		}
		if err := (Target{Name: "x", Memcache: addr}).check(true); err != nil {
			t.Errorf("%s with remote allowed: %v", addr, err)
		}
	}
}

func TestValidate(t *testing.T) {
	base := DefaultConfig()
	base.Scenarios = []string{"get"}
	base.Targets = []Target{{Name: "mc", Memcache: "127.0.0.1:1"}}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(c *Config)
		err  string
	}{
		{func(c *Config) { c.Scenarios = nil }, "no scenario"},
		{func(c *Config) { c.Scenarios = []string{"scan"} }, "unknown scenario"},
		{func(c *Config) { c.Targets = nil }, "nothing to measure"},
		{func(c *Config) { c.NoBaseline = true }, "only applies"},
		{func(c *Config) { c.Spawn = true; c.Targets[0].Name = "memcached" }, "used twice"},
		{func(c *Config) { c.Targets[0].Memcache = "192.168.1.1:11211" }, "non-loopback"},
		{func(c *Config) { c.Duration = 0 }, "duration"},
		{func(c *Config) { c.Conns = 0 }, "conns"},
		{func(c *Config) { c.ReadLatKeys = 101 }, "readlat keys"},
		{func(c *Config) { c.ReadLatWriters = []int{-1} }, "readlat writers"},
		{func(c *Config) { c.ReadLatReader = "spin" }, "readlat reader"},
		{func(c *Config) { c.ReadLatWriteRate = -1 }, "readlat write rate"},
		{func(c *Config) { c.ReadLatVia = "udp" }, "readlat via"},
		{func(c *Config) { c.GetVia = "udp" }, "get via"},
		{func(c *Config) { c.ValueSize = 2 << 20 }, "value size"},
		{func(c *Config) { c.Keys = 10; c.MultiKeys = 11 }, "multi-get keys"},
		{func(c *Config) { c.MultiPct = 101 }, "percentage"},
		{func(c *Config) { c.LoadVia = "ftp" }, "load-via"},
		{func(c *Config) { c.BatchSizes = []int{0} }, "batch size"},
		{func(c *Config) { c.PropagationRate = 0 }, "propagation rate"},
		{func(c *Config) { c.DB = "a/b" }, "database"},
	} {
		c := base
		c.Targets = append([]Target(nil), base.Targets...)
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("want %q, got %v", tc.err, err)
		}
	}
}

func TestFlagValues(t *testing.T) {
	var l IntList
	var tl TargetList
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&l, "l", "")
	fs.Var(&tl, "t", "")
	if err := fs.Parse([]string{"-l", "0, 1,2", "-t", "a=127.0.0.1:1", "-t", "b=127.0.0.1:2,http=127.0.0.1:3"}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual([]int(l), []int{0, 1, 2}) || l.String() != "0,1,2" || len(tl) != 2 || tl[1].HTTP != "127.0.0.1:3" {
		t.Errorf("got %v %v", l, tl)
	}
	if err := l.Set("1,x"); err == nil {
		t.Error("accepted 1,x")
	}
	if got := ExpandScenarios([]string{"get", "all", "get"}); !reflect.DeepEqual(got, []string{"get", "readlat", "write", "getput", "propagation"}) {
		t.Errorf("ExpandScenarios: %v", got)
	}
}

func TestListenerLines(t *testing.T) {
	w := newLineWatcher(&tailBuffer{max: 100})
	// Written in pieces, with log prefixes, an https and a unix listener.
	for _, p := range []string{
		"2026/01/02 INFO http listen", "ing on 127.0.0.1:8080\n",
		"unix listening on /tmp/x.sock db=default\n",
		"memcache listening on 0.0.0.0:11311, db=default\nMemcached listening on [::]:7\n",
		strings.Repeat("y", 10000), "\n",
	} {
		w.Write([]byte(p))
	}
	got := w.listeners()
	want := map[string]string{"http": "127.0.0.1:8080", "memcache": "127.0.0.1:7"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if s := w.out.String(); !strings.HasPrefix(s, "[...]\n") || !strings.HasSuffix(s, "yyy\n") || len(s) != 106 {
		t.Errorf("tail buffer kept %q", s)
	}
	for in, want := range map[string]string{
		"127.0.0.1:1.": "127.0.0.1:1", "http://127.0.0.1:2/": "127.0.0.1:2", "[::]:3": "127.0.0.1:3",
		":4": "127.0.0.1:4", "/tmp/sock": "", "host:http": "", "127.0.0.1:99999": "",
	} {
		if got := normalizeAddr(in); got != want {
			t.Errorf("normalizeAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
