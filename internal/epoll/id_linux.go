package epoll

import "golang.org/x/sys/unix"

// An identifier is kept in the event's 64-bit data, which the
// golang.org/x/sys/unix type splits into Fd and Pad.

func setID(ev *unix.EpollEvent, id uint64) {
	ev.Fd = int32(uint32(id))
	ev.Pad = int32(uint32(id >> 32))
}

func getID(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}
