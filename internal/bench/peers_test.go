package bench

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// checkCounted checks that an op of a phase counted successes with
// ordered percentiles.
func checkCounted(t *testing.T, ph *Phase, op string) {
	t.Helper()
	s := ph.Op(op)
	if s == nil {
		t.Fatalf("%s/%s: no %q stats in %+v", ph.Name, ph.Target, op, ph.Ops)
	}
	l := s.Latency
	if s.Ops <= 0 || l.Count != s.Ops || !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max) {
		t.Errorf("%s/%s %s: implausible %+v", ph.Name, ph.Target, op, s)
	}
}

// TestGetPut runs the getput scenario against a fake memcache target and
// the durable peers that are installed.
func TestGetPut(t *testing.T) {
	a := newFakeTarget(t, "a", false)
	cfg := testConfig()
	cfg.WorkDir = t.TempDir()
	res, err := GetPut(context.Background(), cfg, []*Target{a.t}, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a"}
	for _, peer := range []struct{ name, bin string }{{"redis", "redis-server"}, {"etcd", "etcd"}} {
		if _, err := exec.LookPath(peer.bin); err == nil {
			want = append(want, peer.name)
		} else {
			t.Logf("%s not installed: left out", peer.bin)
		}
	}
	for _, name := range want {
		for _, phase := range []string{"put", "get"} {
			var ph *Phase
			for i := range res.Phases {
				if res.Phases[i].Name == phase && res.Phases[i].Target == name {
					ph = &res.Phases[i]
				}
			}
			if ph == nil {
				t.Fatalf("no %s phase for %s: %+v (notes %v, failures %v)", phase, name, res.Phases, res.Notes, res.Failures)
			}
			if ph.Errors != 0 {
				t.Errorf("%s %s: %d errors (%s)", name, phase, ph.Errors, ph.FirstError)
			}
			checkCounted(t, ph, phase)
		}
	}
	if len(want) == 3 && !strings.Contains(strings.Join(res.Notes, "\n"), "over etcd's") {
		t.Errorf("no ratio to etcd in the notes: %v", res.Notes)
	}
}

// TestPropagationRedisChain runs the propagation scenario with a qs that
// cannot start (the fake): its chain is left out with a note, and the
// Redis chain is measured.
func TestPropagationRedisChain(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	t.Setenv(fakeServeEnv, "exit")
	cfg := testConfig()
	cfg.WorkDir = t.TempDir()
	cfg.QSBin = os.Args[0] // plays qs serve (TestMain)
	cfg.PropagationRate = 200
	res, err := Propagation(context.Background(), cfg, nil, testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 0 || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "chain left out") || !strings.Contains(res.Notes[0], "disk on fire") {
		t.Errorf("failures %v, notes %v: want the qs chain left out", res.Failures, res.Notes)
	}
	if len(res.Phases) != 1 || res.Phases[0].Target != "redis chain" || !res.Phases[0].Baseline {
		t.Fatalf("phases %+v", res.Phases)
	}
	ph := &res.Phases[0]
	if ph.Errors != 0 {
		t.Errorf("%d errors (%s)", ph.Errors, ph.FirstError)
	}
	checkCounted(t, ph, "write")
	checkCounted(t, ph, "visible")
	if w, v := ph.Op("write"), ph.Op("visible"); w.Ops != v.Ops {
		t.Errorf("%d writes, %d seen on the leaf", w.Ops, v.Ops)
	}
	// The CPU time of the intermediate and the leaf, each read from /proc.
	if runtime.GOOS == "linux" {
		if len(ph.CPU.Hops) != 2 || ph.CPU.Hops[0] < 0 || ph.CPU.Hops[1] < 0 {
			t.Errorf("CPU of the processes below the root: %v, want 2 figures", ph.CPU.Hops)
		}
	}
}

// A Redis server's refusals and malformed replies are errors, never values.
func TestRedisConnBadReplies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	replies := []string{"-ERR disk full\r\n", "$abc\r\n", "+PONG\r\n", "$-1\r\n", "$3\r\nabc\r\n", "garbage\n"}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for _, reply := range replies {
			// One command: "*N" then N bulk strings of two lines each.
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			n := int(l[1] - '0')
			for range 2 * n {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
			}
			c.Write([]byte(reply))
		}
	}()
	c, err := dialRedis(context.Background(), ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var re *ReplyError
	if err := c.set("k", []byte("v")); !errors.As(err, &re) {
		t.Errorf("-ERR: %v", err)
	}
	if _, _, err := c.get("k"); !errors.As(err, &re) {
		t.Errorf("bad length: %v", err)
	}
	if _, _, err := c.get("k"); !errors.As(err, &re) {
		t.Errorf("status reply to GET: %v", err)
	}
	if _, found, err := c.get("k"); found || err != nil {
		t.Errorf("nil reply: found %v, %v", found, err)
	}
	if v, found, err := c.get("k"); string(v) != "abc" || !found || err != nil {
		t.Errorf("value: %q %v %v", v, found, err)
	}
	if _, _, err := c.get("k"); err == nil {
		t.Error("a line without CR was accepted")
	}
}
