//go:build unix

package statsd

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed says whether the server has closed conn (or reset it): a
// statsd server never writes, so a read that does not have to wait finds
// either nothing (EAGAIN: the connection is open) or its end. Any bytes a
// server did send are discarded.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [512]byte
	err = rc.Read(func(fd uintptr) bool {
		n, err := syscall.Read(int(fd), buf[:])
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		case err != nil, n == 0:
			closed = true
		}
		return true // never wait for the socket to be readable
	})
	return closed || err != nil
}
