package actors

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// RootKind and RootID name the root actor: remote callers address
// "<daemon address>/meshweaver/root".
const (
	RootKind = "meshweaver"
	RootID   = "root"
)

// rootActor is the daemon's entry point. It decodes what peers send,
// rejects what is undecodable or invalid (with an error reply when there is
// a sender, and a log line always), and routes each message to its user's
// actor, spawning that on the user's first message.
type rootActor struct {
	cfg      *Config
	log      *slog.Logger
	draining bool
}

// NewRoot returns the producer of the root actor. Spawn it with
// SpawnRoot, which sets the options the tree relies on.
func NewRoot(cfg Config) (actor.Producer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return func() actor.Receiver {
		return &rootActor{cfg: &cfg, log: cfg.Logger.With("actor", "root")}
	}, nil
}

// SpawnRoot spawns the root actor on e.
func SpawnRoot(e *actor.Engine, cfg Config) (*actor.PID, error) {
	p, err := NewRoot(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return e.Spawn(p, RootKind, spawnOpts(RootID, log, nil)...), nil
}

func (r *rootActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Initialized, actor.Started, actor.Stopped:
		return
	case drainRequest:
		r.draining = true
		r.log.Info("draining: no new rounds are admitted")
		m.reply <- r.cfg.rounds.idle()
		return
	}
	msg, err := messages.Unwrap(c.Message())
	if err != nil {
		r.reject(c, err)
		return
	}
	switch m := msg.(type) {
	case messages.StartRound:
		r.startRound(c, m)
	case messages.InterruptRound:
		if err := m.Validate(); err != nil {
			r.reject(c, err)
			return
		}
		r.forward(c, m.User, m)
	case messages.SteerRound:
		if err := m.Validate(); err != nil {
			r.reject(c, err)
			return
		}
		r.forward(c, m.User, m)
	case messages.StartLogin:
		r.toUser(c, m.User, m, m.Validate())
	case messages.CancelLogin:
		r.toUser(c, m.User, m, m.Validate())
	case messages.SetAPIKey:
		r.toUser(c, m.User, m, m.Validate())
	case messages.Logout:
		r.toUser(c, m.User, m, m.Validate())
	case messages.AccountRequest:
		r.toUser(c, m.User, m, m.Validate())
	case messages.ModelsRequest:
		r.toUser(c, m.User, m, m.Validate())
	default:
		r.reject(c, fmt.Errorf("%w: the daemon does not accept %T", messages.ErrUnknownType, msg))
	}
}

func (r *rootActor) reject(c *actor.Context, err error) {
	reason := "invalid"
	switch {
	case errors.Is(err, messages.ErrUnknownType):
		reason = "unknown"
	case errors.Is(err, messages.ErrMalformed):
		reason = "malformed"
	}
	r.cfg.Metrics.RemoteRejected.WithLabelValues(reason).Inc()
	r.log.Warn("rejected a message", "type", fmt.Sprintf("%T", c.Message()), "sender", pidString(c.Sender()), "err", err)
	if c.Sender() != nil {
		deliver(c.Engine(), c.Sender(), messages.NewRejected(c.Message(), err), r.log)
	}
}

func (r *rootActor) startRound(c *actor.Context, m messages.StartRound) {
	replyTo := toPID(m.ReplyTo)
	if replyTo != nil && (c.Sender() == nil || c.Sender().Address != replyTo.Address) {
		// hollywood dials a new address inside its one outbound router, so
		// one reply to an address nobody serves holds up every reply to
		// every caller for seconds; and a remote peer must not aim the
		// daemon's replies at the daemon's own actors. A sender may only
		// redirect replies to its own node, which is known to be up.
		r.reject(c, fmt.Errorf("%w: reply_to must be on the sender's node (%s)", messages.ErrInvalid, pidString(c.Sender())))
		return
	}
	if replyTo == nil {
		replyTo = c.Sender()
	}
	if replyTo == nil {
		r.log.Warn("a round with nowhere to reply; dropped", "user", userTag(m.User))
		return
	}
	if m.RoundID == "" {
		m.RoundID = newRoundID()
	}
	verr := m.Validate()
	if verr == nil {
		verr = store.ValidateUserID(m.User)
	}
	if verr == nil {
		verr = store.ValidateKey(m.Thread)
	}
	if verr != nil {
		r.log.Warn("rejected a round", "err", verr)
		r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusRejected)).Inc()
		deliver(c.Engine(), replyTo, messages.RoundFinished{
			RoundID: m.RoundID, Thread: clipKey(m.Thread), Status: messages.StatusRejected, Error: verr.Error(),
		}, r.log)
		return
	}
	if r.draining {
		deliver(c.Engine(), replyTo, messages.RoundFinished{
			RoundID: m.RoundID, Thread: m.Thread, Status: messages.StatusUnavailable,
			Error: "the daemon is shutting down",
		}, r.log)
		r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusUnavailable)).Inc()
		return
	}
	user, err := r.user(c, m.User)
	if err != nil {
		deliver(c.Engine(), replyTo, messages.RoundFinished{
			RoundID: m.RoundID, Thread: m.Thread, Status: messages.StatusRejected, Error: err.Error(),
		}, r.log)
		r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusRejected)).Inc()
		return
	}
	r.cfg.rounds.enter() // left when the round's verdict is sent
	c.Send(user, roundRequest{StartRound: m, replyTo: replyTo})
}

// toUser hands an account message to its user's actor, spawning it: a
// login or model query is a user's first message as much as a round is.
func (r *rootActor) toUser(c *actor.Context, userID string, msg any, verr error) {
	if verr == nil {
		verr = store.ValidateUserID(userID)
	}
	if verr != nil {
		r.reject(c, verr)
		return
	}
	pid, err := r.user(c, userID)
	if err != nil {
		r.reject(c, err)
		return
	}
	c.Engine().SendWithSender(pid, msg, c.Sender())
}

func (r *rootActor) forward(c *actor.Context, userID string, msg any) {
	if err := store.ValidateUserID(userID); err != nil {
		r.reject(c, err)
		return
	}
	pid := c.Child(c.PID().ID + "/user/" + userID)
	if pid == nil {
		deliver(c.Engine(), c.Sender(), messages.RoundControlled{Error: "no running round for that user"}, r.log)
		return
	}
	c.Engine().SendWithSender(pid, msg, c.Sender())
}

// user returns the user's actor, spawning it on the user's first message.
func (r *rootActor) user(c *actor.Context, id string) (*actor.PID, error) {
	if pid := c.Child(c.PID().ID + "/user/" + id); pid != nil {
		return pid, nil
	}
	home, err := homeFor(r.cfg, id)
	if err != nil {
		return nil, err
	}
	r.cfg.Metrics.Users.Inc()
	return c.SpawnChild(newUserActor(r.cfg, id, home), "user", spawnOpts(id, r.log, nil)...), nil
}

func newRoundID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "round-" + hex.EncodeToString(b[:])
}

func pidString(p *actor.PID) string {
	if p == nil {
		return ""
	}
	return p.String()
}

func clipKey(k string) string {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}
