package peeruid

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a connection is refused, as Refusal.Reason and metric labels.
const (
	// ReasonUserUID: the peer's socket belongs to a uid Config.Refuse names.
	ReasonUserUID = "user-uid"
	// ReasonUnknown: the peer is on this host but its socket's owner could
	// not be told (gone, no owner any more, or the lookup failed).
	ReasonUnknown = "unknown-owner"
)

// Refusal is one connection closed unread.
type Refusal struct {
	Listener string         // Config.Name
	Peer     netip.AddrPort // the peer's address
	Reason   string         // ReasonUserUID or ReasonUnknown
	UID      uint32         // the owner, with ReasonUserUID
	Err      error          // why the owner is unknown, with ReasonUnknown
}

// Config says what a wrapped listener refuses.
type Config struct {
	// Name names the listener in refusals ("remote", "gateway", …).
	Name string
	// Refuse reports whether a local peer owned by uid is refused. Nil
	// refuses nobody by uid (a peer of unknown owner is still refused).
	Refuse func(uid uint32) bool
	// OnRefuse is told of every refused connection, after it is closed;
	// it runs on a check's goroutine and must not block.
	OnRefuse func(Refusal)
	// Timeout bounds one lookup (default 250ms); past it the peer's owner
	// is unknown.
	Timeout time.Duration
	// MaxChecks bounds the lookups in flight (default 64); the accept
	// loop waits for a free one.
	MaxChecks int
	// Lookup finds a local peer's owner (default: the kernel's, Lookup).
	Lookup func(peer, local netip.AddrPort, timeout time.Duration) (Owner, error)
	// Local reports whether an address is this host's (default: loopback,
	// the connection's own local address, or an address of an interface).
	Local func(peer, local netip.Addr) bool
}

// Listener is a net.Listener that hands out only connections that passed
// the check.
type Listener struct {
	inner net.Listener
	c     Config

	conns chan net.Conn
	errs  chan error
	done  chan struct{}
	once  sync.Once
	sem   chan struct{}
	wg    sync.WaitGroup
}

// Wrap starts accepting on ln; Close stops the goroutines it started and
// closes ln.
func Wrap(ln net.Listener, c Config) *Listener {
	if c.Timeout <= 0 {
		c.Timeout = 250 * time.Millisecond
	}
	if c.MaxChecks <= 0 {
		c.MaxChecks = 64
	}
	if c.Lookup == nil {
		c.Lookup = Lookup
	}
	if c.Local == nil {
		c.Local = (&hostAddrs{}).local
	}
	l := &Listener{inner: ln, c: c, conns: make(chan net.Conn), errs: make(chan error),
		done: make(chan struct{}), sem: make(chan struct{}, c.MaxChecks)}
	l.wg.Add(1)
	go l.loop()
	return l
}

// Accept returns the next connection that passed, or the inner
// listener's error; net.ErrClosed once closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the inner listener and waits for the checks in flight; a
// connection that passed but was not taken is closed.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.inner.Close()
		l.wg.Wait()
	})
	return err
}

// Addr is the inner listener's.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		conn, err := l.inner.Accept()
		if err != nil {
			select {
			case l.errs <- err:
			case <-l.done:
				return
			}
			var ne net.Error
			if errors.Is(err, net.ErrClosed) || !errors.As(err, &ne) || !ne.Timeout() && !isTemporary(err) {
				return
			}
			continue
		}
		peer, local, ok := Addrs(conn)
		if !ok || !l.c.Local(peer.Addr(), local.Addr()) {
			l.deliver(conn) // not on this host: the listener's own authentication decides
			continue
		}
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			_ = conn.Close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.sem }()
			l.check(conn, peer, local)
		}()
	}
}

// isTemporary is the accept errors http.Server retries (EMFILE and the like).
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

func (l *Listener) check(conn net.Conn, peer, local netip.AddrPort) {
	o, err := l.c.Lookup(peer, local, l.c.Timeout)
	r := Refusal{Listener: l.c.Name, Peer: peer}
	switch {
	case err != nil:
		r.Reason, r.Err = ReasonUnknown, err
	case !o.Live():
		r.Reason, r.Err = ReasonUnknown, ErrOwnerless
	case l.c.Refuse != nil && l.c.Refuse(o.UID):
		r.Reason, r.UID = ReasonUserUID, o.UID
	default:
		l.deliver(conn)
		return
	}
	_ = conn.Close()
	if l.c.OnRefuse != nil {
		l.c.OnRefuse(r)
	}
}

// ErrOwnerless: the kernel knows the socket, but it is not an owned, live
// connection (Owner.Live).
var ErrOwnerless = errors.New("the peer's socket has no owner (closed, or not a connection)")

// UID is the uid owning the socket at peer connected to local, as the
// kernel says within about timeout: Lookup, refusing an ownerless
// socket.
func UID(peer, local netip.AddrPort, timeout time.Duration) (uint32, error) {
	o, err := Lookup(peer, local, timeout)
	if err == nil && !o.Live() {
		err = ErrOwnerless
	}
	return o.UID, err
}

func (l *Listener) deliver(conn net.Conn) {
	select {
	case l.conns <- conn:
	case <-l.done:
		_ = conn.Close()
	}
}

// Addrs are a TCP connection's peer and local addresses, unmapped (ok
// false: not TCP).
func Addrs(conn net.Conn) (peer, local netip.AddrPort, ok bool) {
	p, ok1 := conn.RemoteAddr().(*net.TCPAddr)
	q, ok2 := conn.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return peer, local, false
	}
	peer, local = p.AddrPort(), q.AddrPort()
	return netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()), netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), true
}

// hostAddrs caches this host's interface addresses; a miss refreshes them
// at most once a second.
type hostAddrs struct {
	mu    sync.Mutex
	at    time.Time
	addrs atomic.Pointer[[]netip.Addr]
}

func (h *hostAddrs) local(peer, local netip.Addr) bool {
	if peer.IsLoopback() || peer == local || peer.IsUnspecified() {
		return true
	}
	if h.has(peer) {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.at) < time.Second {
		return h.has(peer)
	}
	h.at = time.Now()
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: look it up (a remote peer is then not found, and refused)
	}
	var as []netip.Addr
	for _, a := range ifas {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				as = append(as, ip.Unmap())
			}
		}
	}
	h.addrs.Store(&as)
	return h.has(peer)
}

func (h *hostAddrs) has(a netip.Addr) bool {
	p := h.addrs.Load()
	if p == nil {
		return false
	}
	for _, x := range *p {
		if x == a {
			return true
		}
	}
	return false
}
