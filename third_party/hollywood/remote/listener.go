package remote

// meshweaver patch: upstream served tls.Listen/net.Listen directly: an
// accepted connection that never started its TLS handshake, or never sent a
// frame, was held for ever (an fd and goroutines each), and one address could
// open any number of them. This listener bounds both.

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// listener caps the accepted connections per remote IP and gives each a
// handshake deadline; TLS, when configured, is layered here so that the
// connection the reader sees knows both its TLS state and its deadlines.
type listener struct {
	net.Listener
	r *Remote

	mu     sync.Mutex
	perIP  map[netip.Addr]int
	silent map[netip.Addr][]*serverConn // per IP, the connections with no first frame yet, oldest first
}

func newListener(inner net.Listener, r *Remote) *listener {
	return &listener{Listener: inner, r: r, perIP: map[netip.Addr]int{}, silent: map[netip.Addr][]*serverConn{}}
}

// dropSilent forgets c among ip's silent connections (it sent its first
// frame, or closed); the caller holds l.mu.
func (l *listener) dropSilent(ip netip.Addr, c *serverConn) {
	s := l.silent[ip]
	for i, x := range s {
		if x == c {
			s = append(s[:i:i], s[i+1:]...)
			break
		}
	}
	if len(s) == 0 {
		delete(l.silent, ip)
	} else {
		l.silent[ip] = s
	}
}

func (l *listener) Accept() (net.Conn, error) {
	lim := l.r.limits
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := addrIP(raw.RemoteAddr())
		// meshweaver patch: at the cap, a new connection evicts the
		// address's oldest one that has sent no frame yet, so that one
		// local process re-opening silent connections cannot lock every
		// other loopback caller out; with none silent, it is refused.
		var victim *serverConn
		l.mu.Lock()
		over := l.perIP[ip] >= lim.MaxConnsPerIP
		if over && len(l.silent[ip]) > 0 {
			victim = l.silent[ip][0]
			l.dropSilent(ip, victim)
		}
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
			l.r.refuse(Refusal{Peer: Peer{Addr: victim.RemoteAddr()}, Reason: RefuseConnCap,
				Err: errors.New("too many connections from this address: the oldest silent one was closed for a new one")})
			over = false
		}
		if over {
			_ = raw.Close()
			l.r.refuse(Refusal{Peer: Peer{Addr: raw.RemoteAddr()}, Reason: RefuseConnCap,
				Err: errors.New("too many connections from this address")})
			continue
		}
		c := &serverConn{Conn: raw, raw: raw, l: l, ip: ip}
		l.mu.Lock()
		l.perIP[ip]++
		l.silent[ip] = append(l.silent[ip], c)
		l.mu.Unlock()
		if l.r.config.TLSConfig != nil {
			c.tls = tls.Server(raw, l.r.config.TLSConfig)
			c.Conn = c.tls
		}
		// The TLS handshake and the first frame must come within this.
		if err := raw.SetDeadline(time.Now().Add(lim.HandshakeTimeout)); err != nil {
			_ = c.Close()
			continue
		}
		return c, nil
	}
}

// serverConn is one accepted connection: its TLS layer (nil in plaintext)
// and its read deadlines.
type serverConn struct {
	net.Conn // what drpc reads and writes: tls or raw
	raw      net.Conn
	tls      *tls.Conn
	l        *listener
	ip       netip.Addr

	established atomic.Bool // a first frame arrived
	closeOnce   sync.Once
}

// Read refreshes the idle deadline once the connection is established:
// every frame, keepalives included, keeps it open.
func (c *serverConn) Read(b []byte) (int, error) {
	if c.established.Load() {
		_ = c.raw.SetReadDeadline(time.Now().Add(c.l.r.limits.ReadIdleTimeout))
	}
	n, err := c.Conn.Read(b)
	if err != nil && !c.established.Load() && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.l.r.refuse(Refusal{Peer: Peer{Addr: c.RemoteAddr()}, Reason: RefuseHandshake, Err: err})
	}
	return n, err
}

// establish ends the handshake deadline after the first frame. The read
// deadline is moved, not cleared: a Read may be pending already.
func (c *serverConn) establish() {
	if c.established.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		c.l.dropSilent(c.ip, c)
		c.l.mu.Unlock()
		_ = c.raw.SetReadDeadline(time.Now().Add(c.l.r.limits.ReadIdleTimeout))
		_ = c.raw.SetWriteDeadline(time.Time{})
	}
}

func (c *serverConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		if c.l.perIP[c.ip]--; c.l.perIP[c.ip] <= 0 {
			delete(c.l.perIP, c.ip)
		}
		c.l.dropSilent(c.ip, c)
		c.l.mu.Unlock()
	})
	return err
}

// peer describes the connection; TLS fields once the handshake is done.
// The error is CheckIdentity's refusal of the peer's certificate.
func (c *serverConn) peer() (Peer, error) {
	p := Peer{Addr: c.RemoteAddr()}
	var err error
	if c.tls != nil {
		cs := c.tls.ConnectionState()
		p.TLS = &cs
		p.Identity, err = c.l.r.identifyChecked(&cs)
	}
	return p, err
}

// addrIP is the IP of a TCP address, unmapped (an IPv4 peer on a dual-stack
// socket counts as IPv4); the zero Addr when there is none.
func addrIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}
