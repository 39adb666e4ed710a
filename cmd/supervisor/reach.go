package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/meshweaver/supervisor/isolate"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/peeruid"
)

// listenerGuard keeps the users' agents off the daemon's listeners: every
// user's app-server shares the host's network, so a plaintext listener on
// 127.0.0.1 is theirs to reach unless a connection from their uids is
// refused (package peeruid; docs/SECURITY.md, "Listeners").
type listenerGuard struct {
	uids isolate.Range // refused; empty: the guard is off
	off  string        // why it is off, for the warning
	rep  *peeruid.Reporter
	// front is the MCP front's upstream connections: one that arrives at
	// a listener is closed unread, whether or not uids are switched.
	front *mcpfront.Conns
}

// guardedListeners are the daemon's listeners the guard wraps.
var guardedListeners = []string{"remote", "gateway", "metrics"}

// newListenerGuard guards with uids, the range the users' app-servers run
// as (empty when the daemon does not switch uids), once the kernel showed
// it can name the owner of a loopback connection's peer.
func newListenerGuard(uids isolate.Range, reg prometheus.Registerer, log *slog.Logger) *listenerGuard {
	g := &listenerGuard{uids: uids}
	switch {
	case uids.Empty():
		g.off = "every app-server runs as the daemon's uid, so a listener cannot tell a user's agent from the daemon's own callers"
	default:
		if err := probePeerUID(); err != nil {
			g.uids, g.off = isolate.Range{}, fmt.Sprintf("the kernel cannot name a local peer's uid (%v)", err)
		}
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "supervisor_listener_refused_total",
		Help: "Connections to the daemon's listeners closed unread because their peer is a local socket of a user's uid (user-uid) or of an owner that cannot be told (unknown-owner).",
	}, []string{"listener", "reason"})
	for _, l := range guardedListeners {
		for _, r := range []string{peeruid.ReasonUserUID, peeruid.ReasonUnknown} {
			refused.WithLabelValues(l, r)
		}
	}
	if reg != nil {
		reg.MustRegister(refused)
	}
	g.rep = &peeruid.Reporter{Log: log, Count: func(l, r string) { refused.WithLabelValues(l, r).Inc() }}
	for _, l := range guardedListeners {
		refused.WithLabelValues(l, reasonMCPFront)
	}
	warns := rate.NewLimiter(rate.Every(6*time.Second), 10)
	g.front = &mcpfront.Conns{OnDrop: func(l string) {
		refused.WithLabelValues(l, reasonMCPFront).Inc()
		if warns.Allow() {
			log.Warn("a connection of the MCP front to a daemon listener was closed: a round's MCP URL leads back to this daemon", "listener", l)
		}
	}}
	return g
}

// active reports whether the users' uids are refused.
func (g *listenerGuard) active() bool { return g != nil && !g.uids.Empty() }

// reasonMCPFront is the refusal of a connection the MCP front made.
const reasonMCPFront = "mcp-front"

// wrap is the guard of the listener called name: the MCP front's own
// connections are closed, and, when the guard is on, the users' uids'.
func (g *listenerGuard) wrap(name string) func(net.Listener) net.Listener {
	uids, active := g.uids, g.active()
	return func(ln net.Listener) net.Listener {
		ln = g.front.Guard(name, ln)
		if !active {
			return ln
		}
		return peeruid.Wrap(ln, peeruid.Config{Name: name, Refuse: uids.Has, OnRefuse: g.rep.Report})
	}
}

// userUIDs reports the uids the guard refuses, for the MCP front, which
// the users' app-servers must reach but each only for its own user's
// URLs; nil when the guard is off.
func (g *listenerGuard) userUIDs() func(uint32) bool {
	if !g.active() {
		return nil
	}
	return g.uids.Has
}

// listen is net.Listen("tcp", addr) behind the guard of name.
func (g *listenerGuard) listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return g.wrap(name)(ln), nil
}

// probePeerUID checks that the kernel names this process's uid as the
// owner of its own loopback connection (NETLINK_SOCK_DIAG), the lookup
// the guard relies on.
func probePeerUID() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	local, peer := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	o, err := peeruid.Lookup(local, peer, time.Second)
	if err != nil {
		return err
	}
	if o.UID != uint32(os.Geteuid()) {
		return fmt.Errorf("it names uid %d for the daemon's own socket, not %d", o.UID, os.Geteuid())
	}
	return nil
}

// reach says, for the start log and serve --check, which of the daemon's
// listeners a user's agent can reach without authentication, given
// whether the guard is on (and why not). It returns the lines to log at
// Info (what is kept off) and at Warn (what is open).
func (o *serveOptions) reach(g *listenerGuard) (kept, open []string) {
	type listener struct{ name, addr string }
	var plain, tlsOn []listener
	add := func(name, addr string, isTLS bool) {
		if addr == "" {
			return
		}
		if isTLS {
			tlsOn = append(tlsOn, listener{name, addr})
		} else {
			plain = append(plain, listener{name, addr})
		}
	}
	add("remote", o.listen, o.tls.enabled())
	add("gateway", o.callers.gatewayListen, o.tls.enabled())
	add("metrics", o.metricsListen, false)
	names := func(ls []listener) string {
		var s []string
		for _, l := range ls {
			s = append(s, l.name+" "+l.addr)
		}
		return strings.Join(s, ", ")
	}
	if g.active() {
		kept = append(kept, fmt.Sprintf("the users' uids (%s) are refused on the daemon's listeners: %s", g.uids, names(append(plain, tlsOn...))))
	} else if len(plain) > 0 {
		open = append(open, fmt.Sprintf("a user's agent can reach these listeners without authentication: %s (%s); use mutual TLS (--tls-cert, --tls-key, --tls-ca) for the remote and the gateway, and keep the metrics listener off (--metrics-listen '') where users are not trusted",
			names(plain), g.off))
	}
	if o.cluster.embedded() && !o.cluster.etcdFiles(o.tls).Enabled() {
		// etcd opens its own sockets: the guard cannot wrap them.
		open = append(open, fmt.Sprintf("plaintext embedded etcd (--allow-plaintext): its client (%s) and peer (%s) ports take connections from every local process, the users' agents included, and whoever writes its keys moves users between members; use mutual TLS (--etcd-tls-cert, --etcd-tls-key, --etcd-tls-ca, or --tls-*)",
			o.cluster.etcdClient, o.cluster.etcdPeer))
	}
	return kept, open
}
