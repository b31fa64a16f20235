//go:build !linux

package memcache

import (
	"errors"
	"net"
)

// Dedicated threads are implemented for Linux only; elsewhere every
// connection is served through the network poller.
func newThreadSock(net.Conn) (sock, bool) { return nil, false }

func setThreadNice(int) error { return errors.ErrUnsupported }

func threadNice() int { return 0 }
