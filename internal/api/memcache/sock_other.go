//go:build !linux

package memcache

import (
	"errors"
	"net"
	"time"
)

// Dedicated threads are implemented for Linux only; elsewhere every
// connection is served through the network poller.
func newThreadSock(net.Conn) (sock, bool) { return nil, false }

func setThreadNice(int) error { return errors.ErrUnsupported }

func threadNice() int { return 0 }

func setThreadSlice(time.Duration) error { return errors.ErrUnsupported }

func threadSlice() time.Duration { return 0 }
