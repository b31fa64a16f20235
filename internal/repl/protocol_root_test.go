package repl

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/store"
)

func TestDecodeRootRejectsBadInput(t *testing.T) {
	long := strings.Repeat("a", MaxRootAddr+1)
	tooMany := (&Root{HTTP: slices.Repeat([]string{"h:1"}, MaxRootAddrs+1)}).AppendPayload(nil)
	for name, p := range map[string][]byte{
		"empty":          nil,
		"bad count":      {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"too many":       tooMany,
		"empty address":  {1, 0},
		"too long":       (&Root{HTTP: []string{long}}).AppendPayload(nil),
		"truncated":      {1, 5, 'h', ':'},
		"trailing bytes": append((&Root{HTTP: []string{"h:1"}}).AppendPayload(nil), 0),
	} {
		t.Run(name, func(t *testing.T) {
			if m, err := DecodePayload(MsgRoot, p); !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodePayload = %+v, %v; want ErrMalformed", m, err)
			}
		})
	}
}

func TestRootAddrs(t *testing.T) {
	long := strings.Repeat("a", MaxRootAddr+1)
	if got := RootAddrs([]string{"", "a:1", "b:1", "a:1", long, "c:1"}); !slices.Equal(got, []string{"a:1", "b:1", "c:1"}) {
		t.Fatalf("RootAddrs = %v", got)
	}
	var many []string
	for i := range 40 {
		many = append(many, string(rune('a'+i%26))+strings.Repeat("x", i/26)+":1")
	}
	if got := RootAddrs(many); len(got) != MaxRootAddrs {
		t.Fatalf("RootAddrs kept %d of 40, want %d", len(got), MaxRootAddrs)
	}
	if got := RootAddrs(nil); got != nil {
		t.Fatalf("RootAddrs(nil) = %v", got)
	}
}

func TestFallbackVersion(t *testing.T) {
	for v, want := range map[uint16]uint16{PathVersion: RootVersion, QuietVersion: RootVersion, RootVersion: HeadVersion, HeadVersion: streamVersion, ReportVersion: streamVersion, 2: streamVersion} {
		if got := fallbackVersion(v); got != want {
			t.Errorf("fallbackVersion(%d) = %d, want %d", v, got, want)
		}
	}
}

// TestRootAddressDownTheTree: the root's HTTP address travels down a
// chain root → A → B (each replica passes on what its source told it), and
// so does a change of it; a replica of a source that knows none learns
// that it is not known.
func TestRootAddressDownTheTree(t *testing.T) {
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	var rootHTTP atomic.Value
	rootHTTP.Store([]string{"root-1:7380"})
	prev := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.RootHTTP = func(db string) []string { return rootHTTP.Load().([]string) }
	})
	var replicas []*Replica
	for range 2 {
		st := openStore(t, "", name, root.DBID(), store.Retention{})
		pid := NewProcessID()
		r, _ := startReplica(t, st, pid, []string{prev}, nil)
		prev = startServer(t, st, pid, func(c *ServerConfig) {
			c.RootHTTP = func(string) []string { return r.State().RootHTTP }
		})
		replicas = append(replicas, r)
	}
	leaf := replicas[1]
	waitFor(t, "the leaf to learn the root's address", 30*time.Second, func() bool {
		return slices.Equal(leaf.State().RootHTTP, []string{"root-1:7380"})
	})
	if v := testutil.ToFloat64(metricsOf(t).rootKnown.WithLabelValues(name)); v != 1 {
		t.Fatalf("qs_repl_root_known = %v with the root known, want 1", v)
	}
	rootHTTP.Store([]string{"root-2:7380", "root-1:7380"})
	waitFor(t, "the leaf to learn the new addresses", 30*time.Second, func() bool {
		return slices.Equal(leaf.State().RootHTTP, []string{"root-2:7380", "root-1:7380"})
	})
	rootHTTP.Store([]string(nil))
	waitFor(t, "the leaf to learn that the root's address is not known", 30*time.Second, func() bool {
		return len(leaf.State().RootHTTP) == 0
	})
	waitFor(t, "qs_repl_root_known to say so", 30*time.Second, func() bool {
		return testutil.ToFloat64(metricsOf(t).rootKnown.WithLabelValues(name)) == 0
	})
}

// streamFromOlderSource starts a replica of a source that speaks up to
// version newest, and returns it once it streams, with the Hello
// versions it sent.
func streamFromOlderSource(t *testing.T, newest uint16) (*Replica, []uint16) {
	t.Helper()
	id := store.DBID{5, byte(newest)}
	addr, versions, _ := fakeOldSource(t, id, newest)
	rep := openStore(t, "", dbName(t), id, store.Retention{})
	r, _ := startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitFor(t, "streaming from the older source", 30*time.Second, func() bool { return r.State().Status == StatusStreaming })
	return r, versions()
}

// TestOlderSourceKeepsHeadVersion: a source that speaks up to
// HeadVersion refuses the Hellos of PathVersion and RootVersion; the
// replica speaks HeadVersion to it, on the same attempt, and knows no
// root address.
func TestOlderSourceKeepsHeadVersion(t *testing.T) {
	r, got := streamFromOlderSource(t, HeadVersion)
	if !slices.Equal(got, []uint16{PathVersion, RootVersion, HeadVersion}) {
		t.Fatalf("hello versions %v, want [%d %d %d]", got, PathVersion, RootVersion, HeadVersion)
	}
	if s := r.State(); s.Sessions != 1 || len(s.RootHTTP) != 0 {
		t.Fatalf("state %+v: want one session and no root address", s)
	}
}
