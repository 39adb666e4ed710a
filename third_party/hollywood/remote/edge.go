package remote

// meshweaver patch: the types the daemon's edge uses to see, refuse and bound
// inbound input (issue 9). Nothing here exists upstream.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Peer is the connection a message arrived on.
type Peer struct {
	Addr     net.Addr             // the connection's remote address (IP:ephemeral port)
	TLS      *tls.ConnectionState // nil in plaintext
	Identity string               // Config.Identify(TLS) under TLS; "" in plaintext
}

// Inbound is one message read off a connection, before delivery.
type Inbound struct {
	Peer   Peer
	Target *actor.PID
	Sender *actor.PID // nil when the frame named none; already checked to be bound to Peer
	Msg    any        // the deserialized proto message (for the daemon: *anypb.Any)
}

// Gate sees every inbound message that passed the transport's own checks. It
// returns the message to deliver to in.Target (the same or a replacement) and
// true, or false to drop it (the gate itself counts, logs and replies as it
// sees fit). It runs on the connection's own reader goroutine: it may block
// that connection, no other (and Remote.Stop waits for it). A panic in it
// drops that one message (recovered and reported as a Refusal).
type Gate func(in Inbound) (msg any, ok bool)

// Refusal is inbound input the transport dropped without delivering it.
type Refusal struct {
	Peer   Peer
	Reason string // one of the Refuse* constants
	Err    error  // detail, safe to log (no payload bytes)

	// For a message refused as RefuseSender (its sender could not be bound
	// to the connection, so nothing can be sent to that address): the
	// message and its sender as the frame named them, and Reply, which
	// sends a message back over the connection the refused one came on, to
	// a PID on the sender's node. The peer delivers it when its remote
	// takes answers on its outbound connections (WithAnswers); a peer that
	// does not, drops it. Nil otherwise.
	Sender *actor.PID
	Msg    any
	Reply  func(to *actor.PID, msg any) error
}

// The reasons of a Refusal.
const (
	RefuseFrame     = "frame"     // envelope with bad indices / no targets / nil message
	RefuseType      = "type"      // a type name the receiver cannot deserialize
	RefuseSender    = "sender"    // sender address not bound to the connection's peer
	RefuseTooLarge  = "too-large" // frame over MaxFrame (connection closed: nothing else possible)
	RefuseConnCap   = "conn-cap"  // over the per-IP connection cap
	RefuseHandshake = "handshake" // TLS handshake (or first frame) failed or timed out
	RefusePanic     = "panic"     // a panic while handling one message (recovered)
)

// DefaultMaxFrame is the default Limits.MaxFrame: above the project's
// largest legal body (16 MiB) plus its envelope.
const DefaultMaxFrame = 20 << 20

// Limits bound what one peer can cost. A zero field takes its default.
type Limits struct {
	MaxFrame          int           // largest envelope sent or accepted; default DefaultMaxFrame
	DialTimeout       time.Duration // per dial attempt incl. TLS handshake, default 5s
	HandshakeTimeout  time.Duration // accepted conns must finish TLS (and send a first frame) within, default 10s
	IdleTimeout       time.Duration // a writer with nothing held and nothing sent for this long closes; default 10m. It also bounds one write: a peer that stops reading costs its writer no longer
	KeepaliveInterval time.Duration // while an address is held, an empty envelope at least this often; default 30s
	ReadIdleTimeout   time.Duration // an accepted conn with no frame (keepalives count) for this long closes; default 2*IdleTimeout (keep it above the peers' IdleTimeout and KeepaliveInterval)
	MaxConnsPerIP     int           // accepted conns per remote IP, default 64
	StopFlush         time.Duration // Stop lets the writers send what is queued for at most this long before it cuts them; default DialTimeout
}

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.MaxFrame <= 0 {
		l.MaxFrame = DefaultMaxFrame
	}
	if l.DialTimeout <= 0 {
		l.DialTimeout = 5 * time.Second
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 10 * time.Minute
	}
	if l.KeepaliveInterval <= 0 {
		l.KeepaliveInterval = 30 * time.Second
	}
	if l.ReadIdleTimeout <= 0 {
		l.ReadIdleTimeout = 2 * l.IdleTimeout
	}
	if l.StopFlush <= 0 {
		l.StopFlush = l.DialTimeout
	}
	if l.MaxConnsPerIP <= 0 {
		l.MaxConnsPerIP = 64
	}
	return l
}

// WithGate sets the Gate every inbound message passes before delivery. Nil
// (the default) delivers every message that passed the transport's checks.
func (c Config) WithGate(g Gate) Config {
	c.gate = g
	return c
}

// WithOnRefuse sets the function called for every Refusal; it must not
// block. The default logs the refusal at Debug level.
func (c Config) WithOnRefuse(f func(Refusal)) Config {
	c.onRefuse = f
	return c
}

// WithIdentify sets how a TLS peer's identity is named (Peer.Identity and
// the sender binding). The default is DefaultIdentify.
func (c Config) WithIdentify(f func(*tls.ConnectionState) string) Config {
	c.identify = f
	return c
}

// WithAnswers makes the remote deliver the messages a peer sends back
// over a connection this remote dialled (Refusal.Reply on the other side):
// a caller's remote sets it, so that a daemon that cannot dial it back can
// still tell it that its message was refused. Only messages addressed to
// this remote's own address are delivered. Without it (a daemon's remote:
// the peers it dials are callers, whose messages must pass the edge) they
// are read and dropped.
func (c Config) WithAnswers() Config {
	c.answers = true
	return c
}

// WithListener wraps the TCP listener before anything else sees its
// connections (below TLS, the per-IP cap and the handshake deadline): a
// connection the wrapper does not hand out costs the transport nothing.
// Closing the wrapper must close the listener it wraps.
func (c Config) WithListener(wrap func(net.Listener) net.Listener) Config {
	c.wrap = wrap
	return c
}

// WithDialVerify makes every TLS dial verify its peer by the address it
// dials: each try clones TLSConfig with VerifyConnection set to
// verify(addr), called at that try, so what it decides from (a member
// list that changes) is read then. A nil result keeps TLSConfig's own
// VerifyConnection. verify runs on the writer's goroutine, one per
// address, concurrently for different addresses.
func (c Config) WithDialVerify(verify func(addr string) func(tls.ConnectionState) error) Config {
	c.dialVerify = verify
	return c
}

// WithLimits sets the transport's limits; zero fields keep their defaults.
func (c Config) WithLimits(l Limits) Config {
	c.limits = l
	return c
}

// TypedIdentity is an identity, or an identity pattern, with its kind:
// "uri:<URI>" and "cn:<CN>" stay as they are; a name without a kind takes
// the one it spells, a URI when it holds "://", else a CN. "*" and "" stay.
// It is the one rule by which DefaultIdentify's names, the policy's
// patterns and a caller's expected server identity are compared.
func TypedIdentity(s string) string {
	switch {
	case s == "" || s == "*" || strings.HasPrefix(s, "uri:") || strings.HasPrefix(s, "cn:"):
		return s
	case strings.Contains(s, "://"):
		return "uri:" + s
	}
	return "cn:" + s
}

// DefaultIdentify names a TLS peer by the URI SAN of its leaf
// certificate, as "uri:<URI>", else its Subject CN, as "cn:<CN>"; "" when
// it sent no certificate or the certificate has neither (DNS or IP SANs
// name hosts, not callers). The kind is part of the name, so a CN that
// spells a URI ("cn:spiffe://mesh/gateway") is never the URI identity
// ("uri:spiffe://mesh/gateway"): a CA that lets requesters choose their CN
// does not hand out URI identities. A leaf with several URI SANs names no
// one identity (CheckIdentity refuses it); DefaultIdentify gives its first.
func DefaultIdentify(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return ""
	}
	leaf := cs.PeerCertificates[0]
	if len(leaf.URIs) > 0 && leaf.URIs[0] != nil {
		return "uri:" + leaf.URIs[0].String()
	}
	if cn := leaf.Subject.CommonName; cn != "" {
		return "cn:" + cn
	}
	return ""
}

// CheckIdentity refuses a peer whose leaf certificate names no one
// identity: one that carries URI SANs must carry exactly one (an X.509-SVID
// has one SPIFFE ID), else which of them the peer is would be a choice of
// this node's, and a CA that signs a second URI into a certificate would
// hand out a second identity. Every place that names a TLS peer by
// DefaultIdentify checks this first: the handshake (a listener, a dial)
// refuses such a certificate with this error.
func CheckIdentity(cs *tls.ConnectionState) error {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return nil
	}
	if n := len(cs.PeerCertificates[0].URIs); n > 1 {
		return fmt.Errorf("the peer's certificate carries %d URI SANs; an identity needs exactly one (SPIFFE)", n)
	}
	return nil
}

// VerifyChain verifies a peer's certificates as a handshake hands them
// over (leaf first, then the intermediates the peer sent) against roots,
// for usage, now: what crypto/tls does before it checks a host name. With
// it, a peer is verified by its identity (DefaultIdentify of the same
// state) instead of by the host it was dialled at, which a URI-only
// certificate (a SPIFFE SVID) does not name.
func VerifyChain(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(certs) == 0 {
		return errors.New("the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// VerifyIdentity returns a tls.Config.VerifyConnection for a node that
// expects its peer to be want (a typed identity, TypedIdentity): as a
// client it verifies the chain against roots itself (the config sets
// InsecureSkipVerify, which turns off crypto/tls's chain and host-name
// checks alike); as a server crypto/tls has verified the client's chain
// (VerifiedChains) against its ClientCAs. Either way the peer must pass
// CheckIdentity and its DefaultIdentify must be want.
func VerifyIdentity(want string, roots *x509.CertPool) func(tls.ConnectionState) error {
	want = TypedIdentity(want)
	return func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 {
			if err := VerifyChain(cs.PeerCertificates, roots, x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
		}
		if err := CheckIdentity(&cs); err != nil {
			return err
		}
		if got := DefaultIdentify(&cs); got != want {
			return fmt.Errorf("the peer is %.200q, not %.200q", got, want)
		}
		return nil
	}
}

// TooLargeEvent is broadcast on the engine's event stream when a local actor
// sends a message whose envelope would exceed Limits.MaxFrame: the message
// is not sent (the receiver would close the connection) and the connection
// stays up. Subscribe to it to tell the sender.
type TooLargeEvent struct {
	Target *actor.PID
	Sender *actor.PID
	Msg    any
	Size   int // the envelope's size estimate, bytes
	Limit  int // Limits.MaxFrame
}
