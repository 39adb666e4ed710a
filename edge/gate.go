package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Reasons a message is refused: the values of the reason label of
// supervisor_remote_rejected_total for what the gate refuses (the
// transport's own refusals use its Refuse* names).
const (
	ReasonTarget       = "target"       // addressed to anything but the root
	ReasonInternal     = "internal"     // a sender on the daemon's own address
	ReasonNoSender     = "no-sender"    // nobody to answer
	ReasonUnknown      = "unknown"      // a type the daemon does not know or accept
	ReasonMalformed    = "malformed"    // undecodable
	ReasonInvalid      = "invalid"      // fails validation
	ReasonUnauthorized = "unauthorized" // the identity may not send this for this user
	ReasonRate         = "rate"         // over the peer's rate limit
)

// Config is what a [Gate] needs. Zero limits take the defaults named.
type Config struct {
	// Self is the daemon's own address; Root its one public actor.
	Self string
	Root *actor.PID
	// Relays, when set, is the id prefix of the daemon's relay actors (a
	// cluster member's, actors/relay.go): they may be addressed too, with
	// answers only (IsReply), by an identity granted the cluster kind for
	// every user ("*").
	Relays string
	// Policy authorizes identities; nil allows every peer everything.
	Policy *Policy
	// PeerRate and PeerBurst limit each peer's messages (defaults 20/s, 40);
	// a peer is its identity under TLS and its IP in plaintext.
	PeerRate  float64
	PeerBurst int
	// ReplyRate and ReplyBurst limit the refusals answered to each peer
	// (defaults 5/s, 20); past them a refusal is only counted.
	ReplyRate  float64
	ReplyBurst int
	// MaxPeers bounds the limiter table (default 10000); entries idle for
	// PeerIdle (default 1m) go first when it is full.
	MaxPeers int
	PeerIdle time.Duration
	// LogFirst lines per reason are logged in each LogWindow (defaults 10,
	// 1m), then one summary line with the count of those left out.
	LogFirst  int
	LogWindow time.Duration
	// Reply sends a refusal to a verified sender (required).
	Reply func(to *actor.PID, msg any)
	// Rejected counts refusals by reason (nil: not counted).
	Rejected *prometheus.CounterVec
	// Rounds counts the rounds refused here under the status label
	// "rejected", their verdict (nil: not counted).
	Rounds *prometheus.CounterVec
	// Logger receives the sampled lines (slog.Default when nil).
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Input is one message off a connection, as the transport hands it over.
type Input struct {
	Identity string   // the peer's certificate identity; "" in plaintext
	Addr     net.Addr // the connection's remote address
	Target   *actor.PID
	Sender   *actor.PID // bound to the connection by the transport; may be nil
	Msg      any
}

// Gate checks every inbound message. It is safe for concurrent use: each
// connection's reader calls it on its own goroutine.
type Gate struct {
	cfg    Config
	peers  *peerLimits
	sample *Sampler
	log    *slog.Logger
}

// New returns a gate.
func New(cfg Config) *Gate {
	if cfg.PeerRate <= 0 {
		cfg.PeerRate = 20
	}
	if cfg.PeerBurst <= 0 {
		cfg.PeerBurst = 40
	}
	if cfg.ReplyRate <= 0 {
		cfg.ReplyRate = 5
	}
	if cfg.ReplyBurst <= 0 {
		cfg.ReplyBurst = 20
	}
	if cfg.MaxPeers <= 0 {
		cfg.MaxPeers = 10000
	}
	if cfg.PeerIdle <= 0 {
		cfg.PeerIdle = time.Minute
	}
	if cfg.LogFirst <= 0 {
		cfg.LogFirst = 10
	}
	if cfg.LogWindow <= 0 {
		cfg.LogWindow = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Gate{
		cfg: cfg,
		peers: newPeerLimits(cfg.MaxPeers, cfg.PeerIdle, rate.Limit(cfg.PeerRate), cfg.PeerBurst,
			rate.Limit(cfg.ReplyRate), cfg.ReplyBurst),
		sample: NewSampler(cfg.LogFirst, cfg.LogWindow),
		log:    cfg.Logger.With("component", "edge"),
	}
}

// Peers is the number of peers whose limiters are kept.
func (g *Gate) Peers() int { return g.peers.len() }

// PeerKey is what the rate limits are kept by: the identity under TLS,
// the remote IP in plaintext. On loopback every caller is one host, so
// there it is the sender's address (bound to the connection by the
// transport): callers on one development machine do not share a bucket.
func PeerKey(identity string, addr net.Addr, sender *actor.PID) string {
	if identity != "" {
		return "id:" + identity
	}
	if addr == nil {
		return "ip:"
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		host = addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && sender != nil {
		return "loopback:" + sender.Address
	}
	return "ip:" + host
}

// Check decides one message: the decoded message to deliver to the root
// and true, or false when it was refused (counted, logged when sampled,
// answered when there is a sender to answer).
func (g *Gate) Check(in Input) (any, bool) {
	key := PeerKey(in.Identity, in.Addr, in.Sender)
	if in.Sender != nil && in.Sender.Address == g.cfg.Self {
		// Never answered: the answer would go to the daemon's own actors.
		g.refuse(in, key, ReasonInternal, nil, fmt.Errorf("sender %q is on the daemon's own address", in.Sender.ID))
		return nil, false
	}
	if g.cfg.Relays != "" && in.Target != nil && in.Target.Address == g.cfg.Self && strings.HasPrefix(in.Target.ID, g.cfg.Relays) {
		return g.checkRelayReply(in, key)
	}
	if in.Target == nil || in.Target.Address != g.cfg.Self || in.Target.ID != g.cfg.Root.ID {
		g.refuse(in, key, ReasonTarget, in.Msg, fmt.Errorf("only %s may be addressed from outside the daemon", g.cfg.Root.ID))
		return nil, false
	}
	if in.Sender == nil {
		g.refuse(in, key, ReasonNoSender, nil, errors.New("a message without a sender cannot be answered"))
		return nil, false
	}
	msg, err := messages.Unwrap(in.Msg)
	if err != nil {
		reason := ReasonMalformed
		if errors.Is(err, messages.ErrUnknownType) {
			reason = ReasonUnknown
		}
		g.refuse(in, key, reason, in.Msg, err)
		return nil, false
	}
	// A decoded message answers in its own terms from here on.
	if !g.peers.allowMsg(key, g.cfg.Now()) {
		g.refuse(in, key, ReasonRate, msg, fmt.Errorf("rate limited: %g messages/s per peer (burst %d)", g.cfg.PeerRate, g.cfg.PeerBurst))
		return nil, false
	}
	kind, user, ok := KindOf(msg)
	if !ok {
		g.refuse(in, key, ReasonUnknown, msg, fmt.Errorf("%w: the daemon does not accept %T from a peer", messages.ErrUnknownType, msg))
		return nil, false
	}
	if err := validate(msg, user); err != nil {
		g.refuse(in, key, ReasonInvalid, msg, err)
		return nil, false
	}
	if to := replyTo(msg); to != nil && to.Address != in.Sender.Address {
		g.refuse(in, key, ReasonInvalid, msg, fmt.Errorf("%w: reply_to must be on the sender's node (%s)", messages.ErrInvalid, in.Sender.Address))
		return nil, false
	}
	if !g.cfg.Policy.Allows(in.Identity, user, kind) {
		g.refuse(in, key, ReasonUnauthorized, msg, fmt.Errorf("identity %q may not send %s for user %q", in.Identity, kind, user))
		return nil, false
	}
	return msg, true
}

// checkRelayReply decides a message to one of the daemon's relays: an
// owner's answer, which has no sender to answer and gets none.
//
// A member's answers are not held to the per-peer rate: they are the
// streams of every round it runs for users whose callers came in through
// this member (a round's text deltas alone pass 20 a second), and those
// callers were held to the rate here, at the way in. Dropping one would
// leave its round without its events or its verdict.
func (g *Gate) checkRelayReply(in Input, key string) (any, bool) {
	member := g.cfg.Policy.Allows(in.Identity, "*", KindCluster)
	if !member && !g.peers.allowMsg(key, g.cfg.Now()) {
		g.refuse(in, key, ReasonRate, nil, fmt.Errorf("rate limited: %g messages/s per peer (burst %d)", g.cfg.PeerRate, g.cfg.PeerBurst))
		return nil, false
	}
	msg, err := messages.Unwrap(in.Msg)
	if err != nil {
		reason := ReasonMalformed
		if errors.Is(err, messages.ErrUnknownType) {
			reason = ReasonUnknown
		}
		g.refuse(in, key, reason, nil, err)
		return nil, false
	}
	if !IsReply(msg) {
		g.refuse(in, key, ReasonTarget, nil, fmt.Errorf("a relay takes answers only, not %T", msg))
		return nil, false
	}
	if !member {
		g.refuse(in, key, ReasonUnauthorized, nil, fmt.Errorf("identity %q is not a member of the cluster", in.Identity))
		return nil, false
	}
	return msg, true
}

// replyTo is the reply_to of a message that has one.
func replyTo(msg any) *messages.PID {
	switch m := msg.(type) {
	case messages.StartRound:
		return m.ReplyTo
	case messages.AttachRound:
		return m.ReplyTo
	}
	return nil
}

func validate(msg any, user string) error {
	if v, ok := msg.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	return store.ValidateUserID(user)
}

// refuse counts, logs (sampled) and answers one refusal. msg is what to
// answer about (nil: no answer).
func (g *Gate) refuse(in Input, key, reason string, msg any, err error) {
	g.count(reason)
	now := g.cfg.Now()
	g.logSampled(reason, now, "refused a remote message", "reason", reason, "peer", key,
		"sender", pidString(in.Sender), "target", pidString(in.Target), "err", err)
	g.answer(in, key, msg, err, g.cfg.Reply)
}

// answer sends the refusal of msg (nil: none) to its sender through send,
// within the peer's reply rate: a round's rejected verdict to its reply_to,
// a Rejected for anything else.
func (g *Gate) answer(in Input, key string, msg any, err error, send func(to *actor.PID, msg any)) {
	if msg == nil || in.Sender == nil || send == nil {
		return
	}
	if !g.peers.allowReply(key, g.cfg.Now()) {
		return
	}
	if sr, ok := msg.(messages.StartRound); ok {
		if g.cfg.Rounds != nil {
			g.cfg.Rounds.WithLabelValues(string(messages.StatusRejected)).Inc()
		}
		to := in.Sender
		if sr.ReplyTo != nil && sr.ReplyTo.Address == in.Sender.Address && sr.ReplyTo.ID != "" {
			to = actor.NewPID(sr.ReplyTo.Address, sr.ReplyTo.ID)
		}
		send(to, messages.RoundFinished{RoundID: clip(sr.RoundID, messages.MaxIDLen), Thread: clip(sr.Thread, 64),
			Status: messages.StatusRejected, Error: err.Error()})
		return
	}
	send(in.Sender, messages.NewRejected(msg, err))
}

// Refused records a refusal the transport made itself (reason is one of
// its Refuse* names): counted and logged, sampled.
func (g *Gate) Refused(reason, identity string, addr net.Addr, err error) {
	g.count(reason)
	g.logSampled(reason, g.cfg.Now(), "refused remote input", "reason", reason,
		"peer", PeerKey(identity, addr, nil), "addr", addrString(addr), "err", err)
}

// addrString is a connection's remote address for a log line ("" when
// unknown).
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func (g *Gate) count(reason string) {
	if g.cfg.Rejected != nil {
		g.cfg.Rejected.WithLabelValues(reason).Inc()
	}
}

func (g *Gate) logSampled(reason string, now time.Time, msg string, args ...any) {
	ok, skipped := g.sample.Take(reason, now)
	if skipped > 0 {
		g.log.Warn("refused remote input not logged (counted in supervisor_remote_rejected_total)",
			"reason", reason, "count", skipped, "window", g.cfg.LogWindow)
	}
	if ok {
		g.log.Warn(msg, args...)
	}
}

func pidString(p *actor.PID) string {
	if p == nil {
		return ""
	}
	return clip(p.String(), 200) // a log line of the peer's making stays short
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Admit is Check for a message that arrived over the HTTP gateway, already
// decoded: the same per-peer rate (a peer is the certificate identity, or
// the IP in plaintext), validation and authorization. It returns the
// refusal's reason (one of the Reason* names) and error, counted and
// logged like the remote's; "" and nil admit the message. A message with
// a reply_to is refused: the gateway is its own reply target.
func (g *Gate) Admit(identity string, addr net.Addr, msg any) (reason string, err error) {
	key := PeerKey(identity, addr, nil)
	in := Input{Identity: identity, Addr: addr, Msg: msg}
	if !g.peers.allowMsg(key, g.cfg.Now()) {
		reason, err = ReasonRate, fmt.Errorf("rate limited: %g messages/s per peer (burst %d)", g.cfg.PeerRate, g.cfg.PeerBurst)
	} else if kind, user, ok := KindOf(msg); !ok {
		reason, err = ReasonUnknown, fmt.Errorf("%w: the daemon does not accept %T from a peer", messages.ErrUnknownType, msg)
	} else if verr := validate(msg, user); verr != nil {
		reason, err = ReasonInvalid, verr
	} else if replyTo(msg) != nil {
		reason, err = ReasonInvalid, fmt.Errorf("%w: reply_to is not for the HTTP gateway", messages.ErrInvalid)
	} else if !g.cfg.Policy.Allows(identity, user, kind) {
		reason, err = ReasonUnauthorized, fmt.Errorf("identity %q may not send %s for user %q", identity, kind, user)
	}
	if err != nil {
		g.refuse(in, key, reason, nil, err)
	}
	return reason, err
}
