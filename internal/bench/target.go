package bench

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Target is one server under test. A target without a memcache address
// runs only the write scenario; one without an HTTP address skips it.
type Target struct {
	// Name labels the target in reports ("qs", "memcached", ...).
	Name string `json:"name"`
	// Memcache is the host:port of the memcached text protocol, or "".
	Memcache string `json:"memcache,omitempty"`
	// HTTP is the host:port of the qs HTTP API, or "".
	HTTP string `json:"http,omitempty"`
	// Redis and Etcd are the host:port of a durable peer of the getput
	// and propagation scenarios (peers.go), which starts them itself.
	Redis string `json:"redis,omitempty"`
	Etcd  string `json:"etcd,omitempty"`
	// Baseline marks the target the others are compared to.
	Baseline bool `json:"baseline,omitempty"`
	// Spawned is true for servers this run started.
	Spawned bool `json:"spawned,omitempty"`
	// Version is what the server answered to the memcache "version"
	// command, if anything.
	Version string `json:"version,omitempty"`

	proc *Process // the spawned server, or nil
	// below are the processes further down the replication chain this
	// target heads (the propagation scenario's), in order from its root;
	// a pointer keeps Target comparable.
	below *[]*Target
}

// ParseTarget parses name=memcache_addr[,http=addr]. The memcache address
// may be empty ("qs=,http=127.0.0.1:8080") for an HTTP-only target.
func ParseTarget(s string) (Target, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.ContainsAny(name, " ,=") {
		return Target{}, fmt.Errorf("target %q: want name=memcache_addr[,http=addr]", s)
	}
	t := Target{Name: name}
	parts := strings.Split(rest, ",")
	t.Memcache = parts[0]
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		switch {
		case ok && k == "http" && t.HTTP == "":
			t.HTTP = strings.TrimPrefix(v, "http://")
		case ok && (k == "memcache" || k == "mc") && t.Memcache == "":
			t.Memcache = v
		default:
			return Target{}, fmt.Errorf("target %q: unknown or repeated part %q (want name=memcache_addr[,http=addr])", s, p)
		}
	}
	if t.Memcache == "" && t.HTTP == "" {
		return Target{}, fmt.Errorf("target %q has neither a memcache nor an http address", s)
	}
	for _, a := range []string{t.Memcache, t.HTTP} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return Target{}, fmt.Errorf("target %q: address %q: %v", s, a, err)
		}
	}
	return t, nil
}

func (t Target) String() string {
	s := t.Name + "=" + t.Memcache
	if t.HTTP != "" {
		s += ",http=" + t.HTTP
	}
	return s
}

// errRemote is returned for a target address outside loopback.
var errRemote = errors.New("bench: refusing a non-loopback address (pass --allow-remote to benchmark another host)")

// check verifies that the target's addresses are on loopback, unless
// remote targets are allowed.
func (t Target) check(allowRemote bool) error {
	if allowRemote {
		return nil
	}
	for _, a := range []string{t.Memcache, t.HTTP} {
		if a != "" && !isLoopback(a) {
			return fmt.Errorf("target %s: %s: %w", t.Name, a, errRemote)
		}
	}
	return nil
}

// isLoopback reports whether host:port names a loopback address. Names
// other than "localhost" are not resolved.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// alive returns an error if the target is a spawned server that exited.
func (t *Target) alive() error {
	if t.proc == nil {
		return nil
	}
	return t.proc.Exited()
}

// belowPids are the process ids of t.below.
func (t *Target) belowPids() []int {
	if t.below == nil {
		return nil
	}
	var pids []int
	for _, b := range *t.below {
		pids = append(pids, b.pid())
	}
	return pids
}

// pid returns the process id of a spawned server, or 0.
func (t *Target) pid() int {
	if t.proc == nil || t.proc.cmd.Process == nil {
		return 0
	}
	return t.proc.cmd.Process.Pid
}
