//go:build !linux

package blocksock

import (
	"net"
	"time"
)

// Supported says whether New can succeed on this system.
const Supported = false

// Sock is implemented for Linux only.
type Sock struct{}

// New returns ErrUnsupported: blocking sockets are implemented for Linux
// only, and callers fall back to the network poller.
func New(net.Conn) (*Sock, error) { return nil, ErrUnsupported }

func (*Sock) Read([]byte, time.Time) (int, error)  { return 0, ErrUnsupported }
func (*Sock) Write([]byte, time.Time) (int, error) { return 0, ErrUnsupported }
func (*Sock) CloseRead()                           {}
func (*Sock) Abort()                               {}
