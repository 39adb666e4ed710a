package mcpfront

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The front forwards what a user's agent sends to the upstream its round
// names, with the daemon's rights: from the daemon's uid, which the
// listeners' peer-uid guard lets through. An upstream on this host (the
// gateway, the remote, the metrics listener, anything on loopback) would
// make the front a confused deputy: alice's agent could act as the daemon
// toward it. So the front connects to no loopback, link-local, unspecified
// or multicast address, nor to any address of this host's interfaces,
// unless the operator allows that destination by name (Options.Allow,
// serve's --allow-destination HOST:PORT). The check is on the address
// actually dialled, at connect time (a name that resolves to a refused
// address is refused whatever it resolved to before: no DNS rebinding),
// and the front follows no redirect. The connections the front makes are
// known (Front.Outgoing), so the daemon's listeners refuse them too.

// ErrDestination is wrapped by the error of a dial to a refused address.
var ErrDestination = errors.New("the destination is refused: an address of this host, loopback or link-local (allow it with --allow-destination HOST:PORT)")

// destGuard decides the front's destinations.
type destGuard struct {
	allowMu sync.RWMutex
	allow   []string // HOST:PORT names allowed whatever they resolve to, lower case
	// local lists this host's interface addresses (net.InterfaceAddrs by
	// default; a test's stand-in).
	local func() ([]netip.Addr, error)
	// rule, when set, replaces check's rule (Options.CheckDestination).
	rule func(netip.Addr) error

	mu      sync.Mutex
	cached  []netip.Addr
	fetched time.Time
}

// hostAddrsTTL is how long the host's interface addresses are reused.
const hostAddrsTTL = 5 * time.Second

func newDestGuard(allow []string, local func() ([]netip.Addr, error)) *destGuard {
	if local == nil {
		local = interfaceAddrs
	}
	g := &destGuard{local: local}
	g.setAllowed(allow)
	return g
}

// setAllowed replaces the names allowed.
func (g *destGuard) setAllowed(allow []string) {
	norm := make([]string, 0, len(allow))
	for _, a := range allow {
		norm = append(norm, strings.ToLower(a))
	}
	g.allowMu.Lock()
	g.allow = norm
	g.allowMu.Unlock()
}

func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// allowed reports whether hostport is allowed by name.
func (g *destGuard) allowed(hostport string) bool {
	g.allowMu.RLock()
	defer g.allowMu.RUnlock()
	return slices.Contains(g.allow, strings.ToLower(hostport))
}

// hostAddrs are this host's addresses, cached for hostAddrsTTL.
func (g *destGuard) hostAddrs() ([]netip.Addr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cached != nil && time.Since(g.fetched) < hostAddrsTTL {
		return g.cached, nil
	}
	addrs, err := g.local()
	if err != nil {
		return nil, err
	}
	g.cached, g.fetched = addrs, time.Now()
	return addrs, nil
}

// check refuses a (resolved) address the front must not connect to.
func (g *destGuard) check(a netip.Addr) error {
	a = a.Unmap()
	if g.rule != nil {
		return g.rule(a)
	}
	if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() ||
		a.IsMulticast() || a.IsInterfaceLocalMulticast() {
		return fmt.Errorf("%s: %w", a, ErrDestination)
	}
	host, err := g.hostAddrs()
	if err != nil {
		return fmt.Errorf("%s: this host's addresses are unknown (%v): %w", a, err, ErrDestination)
	}
	if slices.Contains(host, a) {
		return fmt.Errorf("%s: %w", a, ErrDestination)
	}
	return nil
}

// dialer is the front's DialContext: a destination allowed by name is
// dialled as it is; any other is dialled with every resolved address
// checked just before its connect (the dialer's Control), so what is
// checked is what is connected to.
func (g *destGuard) dialer(timeout time.Duration, opened func(net.Conn) net.Conn) func(ctx context.Context, network, addr string) (net.Conn, error) {
	plain := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	guarded := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%s: %w", address, ErrDestination)
			}
			return g.check(ap.Addr())
		}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := guarded
		if g.allowed(addr) {
			d = plain
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return opened(c), nil
	}
}

// checkName resolves a destination the front reaches through a proxy
// (the proxy connects, not the front) and refuses it when any of its
// addresses is refused: the proxy's own connect cannot be checked, so a
// name that changes what it resolves to between this check and the
// proxy's connect is the one gap, named in docs/SECURITY.md.
func (g *destGuard) checkName(ctx context.Context, hostport string) error {
	if g.allowed(hostport) {
		return nil
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return g.check(a)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := g.check(a); err != nil {
			return err
		}
	}
	return nil
}

// Conns is the set of the local ends of a front's live upstream
// connections. The daemon's listeners drop a connection that comes from
// one (Guard): an upstream that leads back to the daemon (an allowed
// destination, a public address that this host's NAT turns back to it)
// does not make the front a deputy either. The zero value is empty; its
// methods are safe for concurrent use.
type Conns struct {
	mu    sync.Mutex
	conns map[netip.AddrPort]int
	// OnDrop, when set, is told of each connection Guard dropped.
	OnDrop func(listener string)
}

func (o *Conns) add(c net.Conn) net.Conn {
	ap, ok := addrPort(c.LocalAddr())
	if !ok {
		return c
	}
	o.mu.Lock()
	if o.conns == nil {
		o.conns = make(map[netip.AddrPort]int)
	}
	o.conns[ap]++
	o.mu.Unlock()
	return &trackedConn{Conn: c, o: o, ap: ap}
}

// Has reports whether ap is the local end of a front's live upstream
// connection.
func (o *Conns) Has(ap netip.AddrPort) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.conns[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] > 0
}

// Guard is ln without the connections the front made: each is closed
// unread as it is accepted.
func (o *Conns) Guard(name string, ln net.Listener) net.Listener {
	return &guardedListener{Listener: ln, o: o, name: name}
}

type guardedListener struct {
	net.Listener
	o    *Conns
	name string
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ap, ok := addrPort(c.RemoteAddr()); ok && l.o.Has(ap) {
			c.Close()
			if l.o.OnDrop != nil {
				l.o.OnDrop(l.name)
			}
			continue
		}
		return c, nil
	}
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// trackedConn leaves the set when it closes.
type trackedConn struct {
	net.Conn
	o    *Conns
	ap   netip.AddrPort
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.o.mu.Lock()
		if c.o.conns[c.ap]--; c.o.conns[c.ap] <= 0 {
			delete(c.o.conns, c.ap)
		}
		c.o.mu.Unlock()
	})
	return c.Conn.Close()
}
