package server

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
)

// inheritedListeners returns the listeners passed by systemd socket
// activation (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES), by name. Names are
// the FileDescriptorName= of the socket units: "http", "memcache-<db>",
// "unix-<db>", "repl", "raft-<db>". Unnamed descriptors are matched by
// address instead.
func inheritedListeners() (map[string][]net.Listener, error) {
	if os.Getenv("LISTEN_FDS") == "" {
		return nil, nil
	}
	ls, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	return ls, nil
}

// listenerSet hands out inherited listeners first and binds the rest.
type listenerSet struct {
	inherited map[string][]net.Listener
	used      map[net.Listener]bool
}

func (l *listenerSet) take(name, network, addr string) net.Listener {
	if l.used == nil {
		l.used = map[net.Listener]bool{}
	}
	pick := func(ln net.Listener) net.Listener {
		l.used[ln] = true
		return ln
	}
	for _, ln := range l.inherited[name] {
		if !l.used[ln] {
			return pick(ln)
		}
	}
	// Unnamed descriptors (LISTEN_FD_3, ...): match by address.
	for _, list := range l.inherited {
		for _, ln := range list {
			if !l.used[ln] && ln.Addr().Network() == network && ln.Addr().String() == addr {
				return pick(ln)
			}
		}
	}
	return nil
}

func (l *listenerSet) listen(name, network, addr string) (net.Listener, error) {
	if ln := l.take(name, network, addr); ln != nil {
		return ln, nil
	}
	if network == "unix" {
		// A socket file left by a crashed process would make Listen fail;
		// remove it only if nothing answers on it.
		if _, err := os.Stat(addr); err == nil {
			if c, err := net.Dial("unix", addr); err == nil {
				c.Close()
				return nil, fmt.Errorf("unix socket %s is in use by another process", addr)
			}
			os.Remove(addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s %s (%s): %w", network, addr, name, err)
	}
	return ln, nil
}

// closeUnused closes inherited listeners that no configured address took.
func (l *listenerSet) closeUnused() {
	var errs []error
	for _, list := range l.inherited {
		for _, ln := range list {
			if !l.used[ln] {
				errs = append(errs, ln.Close())
			}
		}
	}
	_ = errors.Join(errs...)
}
