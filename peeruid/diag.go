package peeruid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Owner is what the kernel says of one TCP socket.
type Owner struct {
	UID   uint32
	State uint8 // TCP state (TCP_ESTABLISHED = 1 …), as in <netinet/tcp.h>
	Inode uint32
}

// Live reports whether the socket is a full, owned connection: a
// TIME_WAIT socket (state 6) has no owner (the kernel reports uid 0), a
// listening (10), closed (7) or half-open one (3, 12) is not the peer of
// an accepted connection.
func (o Owner) Live() bool {
	switch o.State {
	case 1, 2, 4, 5, 8, 9, 11: // established, syn-sent, fin-wait1/2, close-wait, last-ack, closing
		return o.Inode != 0
	}
	return false
}

// ErrNotFound is returned by Lookup when no socket of this network
// namespace has that 4-tuple.
var ErrNotFound = errors.New("no such socket")

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	reqLen           = 16 + 56
	msgLen           = 72 // struct inet_diag_msg
)

// Lookup asks the kernel (NETLINK_SOCK_DIAG, an exact lookup, not a dump)
// for the TCP socket whose own address is src and whose peer is dst, and
// returns its owner. It takes at most about timeout. An IPv4 pair is
// looked up as IPv4 whatever the family of either socket: the kernel's
// IPv4 lookup finds dual-stack sockets too.
func Lookup(src, dst netip.AddrPort, timeout time.Duration) (Owner, error) {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	family := uint8(unix.AF_INET6)
	if s.Is4() && d.Is4() {
		family = unix.AF_INET
	} else {
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return Owner{}, fmt.Errorf("sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return Owner{}, fmt.Errorf("sock_diag: %w", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return Owner{}, fmt.Errorf("sock_diag: %w", err)
	}
	const seq = 1
	req := make([]byte, reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], reqLen)
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], seq)
	r := req[16:] // struct inet_diag_req_v2
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]                     // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], s)
	putAddr(id[20:36], d)
	ne.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], ^uint32(0))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return Owner{}, fmt.Errorf("sock_diag send: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return Owner{}, fmt.Errorf("sock_diag receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return Owner{}, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return Owner{}, errors.New("sock_diag: short error")
				}
				errno := -int32(ne.Uint32(m.Data))
				if errno == 0 {
					continue // an acknowledgement
				}
				if unix.Errno(errno) == unix.ENOENT {
					return Owner{}, ErrNotFound
				}
				return Owner{}, fmt.Errorf("sock_diag: %w", unix.Errno(errno))
			case sockDiagByFamily:
				if len(m.Data) < msgLen {
					return Owner{}, errors.New("sock_diag: short answer")
				}
				return Owner{State: m.Data[1], UID: ne.Uint32(m.Data[64:]), Inode: ne.Uint32(m.Data[68:])}, nil
			case unix.NLMSG_DONE:
				return Owner{}, ErrNotFound
			}
		}
	}
}

func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}
