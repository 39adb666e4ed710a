package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
	"google.golang.org/protobuf/proto"
	"storj.io/drpc/drpcctx"
)

// meshweaver patch: the reader is hardened (issue 9). Upstream indexed the
// envelope's tables with the frame's own indices unchecked (a negative or
// out-of-range index, or no targets, panicked with no recover), dropped the
// connection on a type it could not deserialize (losing the next message
// too), and delivered with whatever sender the frame named. Now each message
// is checked, bound to its connection, passed through the Gate and handled
// under a recover; a bad one is dropped and reported as a Refusal, and the
// connection stays.

type streamReader struct {
	DRPCRemoteUnimplementedServer

	remote       *Remote
	deserializer Deserializer
}

func newStreamReader(r *Remote) *streamReader {
	return &streamReader{
		remote:       r,
		deserializer: ProtoSerializer{},
	}
}

func (r *streamReader) Receive(stream DRPCRemote_ReceiveStream) error {
	defer slog.Debug("streamreader terminated")

	conn := connOf(stream.Context())
	var peer Peer
	if conn != nil {
		var err error
		if peer, err = conn.peer(); err != nil {
			// Before any frame: a certificate that names no one identity
			// holds nothing of this node's, its connection included (a
			// stream's end alone leaves it open for the next stream).
			r.remote.refuse(Refusal{Peer: peer, Reason: RefuseHandshake, Err: err})
			_ = conn.Close()
			return err
		}
	}
	// The sender addresses this connection has bound: each new one costs the
	// node an outbound writer (a dial, an fd, a goroutine), so there are at
	// most maxSendersPerConn of them.
	senders := map[string]struct{}{}
	for {
		envelope, err := stream.Recv()
		if err != nil {
			if errors.Is(err, context.Canceled) {
				break
			}
			if isOverflow(err) {
				r.remote.refuse(Refusal{Peer: peer, Reason: RefuseTooLarge,
					Err: fmt.Errorf("frame over the limit of %d bytes", r.remote.limits.MaxFrame)})
			}
			slog.Debug("streamReader receive", "err", err)
			return err
		}
		if conn != nil {
			conn.establish()
		}
		for _, msg := range envelope.Messages {
			r.handle(peer, senders, envelope, msg, stream)
		}
	}

	return nil
}

// handle checks and delivers one message; whatever goes wrong drops only it.
func (r *streamReader) handle(peer Peer, senders map[string]struct{}, env *Envelope, msg *Message, stream DRPCRemote_ReceiveStream) {
	defer func() {
		if v := recover(); v != nil {
			s := fmt.Sprint(v)
			if len(s) > 200 {
				s = s[:200]
			}
			r.remote.refuse(Refusal{Peer: peer, Reason: RefusePanic, Err: fmt.Errorf("panic: %s", s)})
		}
	}()
	target, sender, tname, err := checkMessage(env, msg)
	if err != nil {
		r.remote.refuse(Refusal{Peer: peer, Reason: RefuseFrame, Err: err})
		return
	}
	payload, err := r.deserializer.Deserialize(msg.Data, tname)
	if err != nil {
		r.remote.refuse(Refusal{Peer: peer, Reason: RefuseType, Err: fmt.Errorf("type %.100q: %w", tname, err)})
		return
	}
	if sender != nil {
		if _, bound := senders[sender.Address]; !bound {
			if len(senders) >= maxSendersPerConn {
				r.remote.refuse(Refusal{Peer: peer, Reason: RefuseSender,
					Err: fmt.Errorf("a connection may name at most %d sender addresses", maxSendersPerConn)})
				return
			}
			if err := r.remote.bindSender(peer, sender); err != nil {
				// Its address cannot be sent to: the refusal may go back
				// over this connection, the one way left to the sender.
				r.remote.refuse(Refusal{Peer: peer, Reason: RefuseSender, Err: err,
					Sender: sender, Msg: payload, Reply: answerOn(stream, r.remote.limits.MaxFrame, sender.Address)})
				return
			}
			senders[sender.Address] = struct{}{}
		}
	}
	if gate := r.remote.config.gate; gate != nil {
		var ok bool
		payload, ok = gate(Inbound{Peer: peer, Target: target, Sender: sender, Msg: payload})
		if !ok {
			return
		}
	}
	r.remote.engine.SendLocal(target, payload, sender)
}

// answerOn returns a Refusal.Reply that sends over stream (the reader's
// own: the handler goroutine is its only sender) to PIDs on addr, the
// sender's node.
func answerOn(stream DRPCRemote_ReceiveStream, maxFrame int, addr string) func(to *actor.PID, msg any) error {
	return func(to *actor.PID, msg any) error {
		if to == nil || to.Address != addr {
			return errors.New("an answer goes to the sender's node only")
		}
		pm, ok := msg.(proto.Message)
		if !ok {
			return fmt.Errorf("an answer must be a proto, not %T", msg)
		}
		data, err := proto.Marshal(pm)
		if err != nil {
			return err
		}
		if len(data) > maxFrame/2 {
			return fmt.Errorf("an answer of %d bytes is over the limit", len(data))
		}
		var b envelopeBuilder
		b.add(&streamDeliver{target: to, msg: msg}, string(proto.MessageName(pm)), data)
		return stream.Send(b.env)
	}
}

// maxSendersPerConn bounds the sender addresses one connection may name
// (a caller names one: its own listen address).
const maxSendersPerConn = 8

// Bounds of a PID's fields on the wire: an address is host:port, an id a
// path of a few actor names; longer ones are attacker-sized log lines.
const (
	maxPIDAddress = 256
	maxPIDID      = 1024
)

// checkPID refuses a PID whose fields exceed the bounds above.
func checkPID(what string, p *actor.PID) error {
	if len(p.Address) > maxPIDAddress || len(p.ID) > maxPIDID {
		return fmt.Errorf("%s PID over %d bytes of address or %d of id", what, maxPIDAddress, maxPIDID)
	}
	return nil
}

// checkMessage bounds-checks msg's indices into env's tables.
func checkMessage(env *Envelope, msg *Message) (target, sender *actor.PID, tname string, err error) {
	if msg == nil {
		return nil, nil, "", errors.New("nil message")
	}
	if i := msg.TypeNameIndex; i < 0 || int(i) >= len(env.TypeNames) {
		return nil, nil, "", fmt.Errorf("type index %d of %d", i, len(env.TypeNames))
	}
	if i := msg.TargetIndex; i < 0 || int(i) >= len(env.Targets) {
		return nil, nil, "", fmt.Errorf("target index %d of %d", i, len(env.Targets))
	}
	target = env.Targets[msg.TargetIndex]
	if target == nil {
		return nil, nil, "", errors.New("nil target")
	}
	if err := checkPID("target", target); err != nil {
		return nil, nil, "", err
	}
	// As upstream: senders are optional for the whole envelope.
	if len(env.Senders) > 0 {
		if i := msg.SenderIndex; i < 0 || int(i) >= len(env.Senders) {
			return nil, nil, "", fmt.Errorf("sender index %d of %d", i, len(env.Senders))
		}
		sender = env.Senders[msg.SenderIndex]
		if sender != nil {
			if err := checkPID("sender", sender); err != nil {
				return nil, nil, "", err
			}
		}
	}
	return target, sender, env.TypeNames[msg.TypeNameIndex], nil
}

// bindSender applies the sender binding rule: the sender's host is the
// connection's remote IP (loopback matches loopback, "localhost" is
// loopback), it is not this node, and under TLS the address, dialled back,
// presents the connection's identity.
func (r *Remote) bindSender(peer Peer, sender *actor.PID) error {
	if sender.Address == r.addr {
		return errors.New("sender names this node's own address")
	}
	host, err := canonicalHost(sender.Address)
	if err != nil {
		return err
	}
	if peer.Addr == nil || !sameHost(host, addrIP(peer.Addr)) {
		return fmt.Errorf("sender host %.100q is not the connection's address", host)
	}
	if peer.TLS == nil {
		return nil
	}
	w := r.writerFor(sender.Address)
	if w == nil {
		return errors.New("remote stopped")
	}
	id, err := w.identity(r.ctx, r.limits.DialTimeout)
	if err != nil {
		return err
	}
	if id != peer.Identity {
		return fmt.Errorf("sender address %.100q presents another identity than the connection", sender.Address)
	}
	return nil
}

// canonicalHost returns the host of a sender address written the one way
// its listener writes it: IP:port as netip prints it, or localhost:port.
// Other spellings of one address (leading zeros in the port, upper case,
// IPv4-mapped IPv6) would each cost the node a writer of its own.
func canonicalHost(addr string) (string, error) {
	bad := fmt.Errorf("sender address %.100q is not a canonical IP:port", addr)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", bad
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
		return "", bad
	}
	if host == "localhost" {
		return host, nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.String() != addr || ap.Addr().Is4In6() || ap.Addr().Zone() != "" {
		return "", bad
	}
	return host, nil
}

// sameHost reports whether host (an IP or "localhost") is ip, counting
// every loopback address as one.
func sameHost(host string, ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	var h netip.Addr
	if strings.EqualFold(host, "localhost") {
		h = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	} else {
		var err error
		if h, err = netip.ParseAddr(host); err != nil {
			return false
		}
		h = h.Unmap().WithZone("")
	}
	if h.IsLoopback() && ip.IsLoopback() {
		return true
	}
	return h == ip
}

// connOf is the accepted connection a stream runs on.
func connOf(ctx context.Context) *serverConn {
	tr, ok := drpcctx.Transport(ctx)
	if !ok {
		return nil
	}
	c, _ := tr.(*serverConn)
	return c
}

// isOverflow reports drpc's error for a packet over MaximumBufferSize (it
// has no sentinel: drpc.ProtocolError with this text).
func isOverflow(err error) bool {
	return err != nil && strings.Contains(err.Error(), "data overflow")
}
