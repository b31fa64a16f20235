//go:build !linux

package epoll

import (
	"net"
	"time"
)

// Set is not available on this system: New fails.
type Set struct{}

// New returns ErrUnsupported: epoll is Linux only.
func New(batch int) (*Set, error) { return nil, ErrUnsupported }

func (*Set) Add(fd int, id uint64) error { return ErrUnsupported }
func (*Set) AddOutput(int, uint64) error { return ErrUnsupported }
func (*Set) Remove(fd int) error         { return ErrUnsupported }
func (*Set) Wait(ids []uint64, timeout time.Duration) ([]uint64, bool, error) {
	return ids, false, ErrUnsupported
}
func (*Set) Wake()        {}
func (*Set) Close() error { return nil }

// FD reports false: sockets are not used by descriptor here.
func FD(net.Conn) (int, bool) { return 0, false }

// Detach fails: sockets are not used by descriptor here.
func Detach(net.Conn) (int, error) { return 0, ErrUnsupported }

func Poll(int, bool, int) error      { return ErrUnsupported }
func Shutdown(int, bool, bool) error { return ErrUnsupported }
func Close(int) error                { return ErrUnsupported }

func Read(int, []byte) (int, error)  { return 0, ErrUnsupported }
func Write(int, []byte) (int, error) { return 0, ErrUnsupported }
