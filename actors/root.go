package actors

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	cfg      *tree
	log      *slog.Logger
	draining bool
	users    map[string]*userEntry // live user actors, by user id
	relays   uint64                // relay actors spawned (their ids)
	cap      *actor.PID            // the node's cap of live app-servers
	// placing: the users whose owner is being looked up (relay.go), with
	// the messages that wait for the answer, in order.
	placing map[string][]placeReq
	lookups sync.WaitGroup // the goroutines looking owners up
	// fences: the fences whose Done waits for user actors to stop.
	fences []pendingFence
}

// userEntry is one live user actor as the root sees it.
type userEntry struct {
	pid  *actor.PID
	sent uint64 // messages the root sent it
	// stopping: reaped, not yet gone; messages for the user wait in
	// pending (bounded) and go to its next actor.
	stopping bool
	pending  []pendingMsg
	// fenced: the actor was stopped by a fence (Fence); its rounds'
	// requests point here (roundRequest.fenced).
	fenced *atomic.Bool
}

type pendingMsg struct {
	msg    any
	sender *actor.PID
}

// maxPending bounds what waits for a reaped user actor to finish stopping.
const maxPending = 64

// errUserCap refuses a new user past MaxUsers.
var errUserCap = errors.New("user cap")

// root is the producer of the tree's root actor.
func (t *tree) root() actor.Producer {
	return func() actor.Receiver {
		return &rootActor{cfg: t, log: t.Logger.With("actor", "root"), users: make(map[string]*userEntry),
			placing: make(map[string][]placeReq)}
	}
}

// SpawnRoot spawns the root actor on e.
func SpawnRoot(e *actor.Engine, cfg Config, deps Deps) (*actor.PID, error) {
	t, err := newTree(cfg, deps)
	if err != nil {
		return nil, err
	}
	return t.spawn(e), nil
}

// spawn spawns the tree's root on e.
func (t *tree) spawn(e *actor.Engine) *actor.PID {
	return e.Spawn(t.root(), RootKind, spawnOpts(RootID, t.Logger, nil)...)
}

func (r *rootActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		r.cap = c.SpawnChild(newCapActor(r.cfg), "cap", spawnOpts("main", r.log, nil)...)
		return
	case actor.Initialized:
		return
	case actor.Stopped:
		r.stopPlacing(c)
		r.endFences()
		return
	case placed:
		r.placed(c, m)
		return
	case pingRequest:
		close(m.reply)
		return
	case drainRequest:
		r.draining = true
		r.cfg.Metrics.Draining.Set(1)
		r.log.Info("draining: no new rounds are admitted")
		c.Engine().BroadcastEvent(DrainStarted{})
		m.reply <- r.cfg.rounds.idle()
		return
	case userIdle:
		r.reap(c, m)
		return
	case userGone:
		r.gone(c, m)
		return
	case Fence:
		r.fence(c, m)
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
	case messages.AnswerRequest:
		if err := m.Validate(); err != nil {
			r.reject(c, err)
			return
		}
		r.forward(c, m.User, m)
	case messages.ToolCallResult:
		if err := m.Validate(); err != nil {
			r.reject(c, err)
			return
		}
		r.forward(c, m.User, m)
	case messages.AttachRound:
		r.attach(c, m)
	case messages.DetachRound:
		r.detach(c, m)
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
	case messages.RateLimitsRequest:
		r.toUser(c, m.User, m, m.Validate())
	case messages.UsageRequest:
		r.toUser(c, m.User, m, m.Validate())
	case messages.CodexRequest:
		r.toUser(c, m.User, m, m.Validate())
	case messages.ListThreads:
		r.toUser(c, m.User, m, m.Validate())
	case messages.ReadThread:
		r.toUser(c, m.User, m, m.Validate())
	case messages.ArchiveThread:
		r.toUser(c, m.User, m, m.Validate())
	case messages.ForkThread:
		r.toUser(c, m.User, m, m.Validate())
	case messages.CompactThread:
		r.toUser(c, m.User, m, m.Validate())
	case messages.WarmUp:
		r.toUser(c, m.User, m, m.Validate())
	default:
		r.reject(c, fmt.Errorf("%w: the daemon does not accept %T", messages.ErrUnknownType, msg))
	}
}

func (r *rootActor) reject(c *actor.Context, err error) {
	r.rejectMsg(c, c.Message(), c.Sender(), err)
}

// rejectMsg is reject for msg from sender, which need not be the message
// in hand (one that waited for its placement).
func (r *rootActor) rejectMsg(c *actor.Context, msg any, sender *actor.PID, err error) {
	reason := "invalid"
	switch {
	case errors.Is(err, messages.ErrUnknownType):
		reason = "unknown"
	case errors.Is(err, messages.ErrMalformed):
		reason = "malformed"
	case errors.Is(err, errUserCap):
		reason = "user-cap"
	}
	r.cfg.Metrics.RemoteRejected.WithLabelValues(reason).Inc()
	if ok, skipped := r.cfg.sample.Take(reason, time.Now()); ok {
		if skipped > 0 {
			r.log.Warn("rejected messages not logged (counted in supervisor_remote_rejected_total)", "reason", reason, "count", skipped)
		}
		r.log.Warn("rejected a message", "type", fmt.Sprintf("%T", msg), "sender", pidString(sender), "err", err)
	}
	if sender != nil {
		rej := messages.NewRejected(msg, err)
		if errors.Is(err, errUserCap) {
			rej.Class = messages.RefusalUnavailable
		}
		deliver(c.Engine(), sender, rej, r.log)
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
		if ok, _ := r.cfg.sample.Take("round", time.Now()); ok {
			r.log.Warn("rejected a round", "err", verr)
		}
		r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusRejected)).Inc()
		deliver(c.Engine(), replyTo, messages.RoundFinished{
			RoundID: m.RoundID, Thread: clipKey(m.Thread), Status: messages.StatusRejected, Error: verr.Error(),
		}, r.log)
		return
	}
	if r.draining {
		r.shuttingDown(c, m, replyTo)
		return
	}
	r.place(c, m.User, m, replyTo, func(c *actor.Context) { r.admitRound(c, m, replyTo) })
}

// shuttingDown answers a round the draining daemon does not admit.
func (r *rootActor) shuttingDown(c *actor.Context, m messages.StartRound, replyTo *actor.PID) {
	deliver(c.Engine(), replyTo, messages.RoundFinished{
		RoundID: m.RoundID, Thread: m.Thread, Status: messages.StatusUnavailable,
		Error: "the daemon is shutting down",
	}, r.log)
	r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusUnavailable)).Inc()
}

// admitRound hands a round placed here to its user's actor.
func (r *rootActor) admitRound(c *actor.Context, m messages.StartRound, replyTo *actor.PID) {
	if r.draining { // it waited for its placement meanwhile
		r.shuttingDown(c, m, replyTo)
		return
	}
	if err := r.ensureUser(c, m.User); err != nil {
		r.unclaim(m.User)
		status := messages.StatusRejected
		if errors.Is(err, errUserCap) {
			status = messages.StatusUnavailable
			r.cfg.Metrics.RemoteRejected.WithLabelValues("user-cap").Inc()
		}
		deliver(c.Engine(), replyTo, messages.RoundFinished{
			RoundID: m.RoundID, Thread: m.Thread, Status: status, Error: err.Error(),
		}, r.log)
		r.cfg.Metrics.Rounds.WithLabelValues(string(status)).Inc()
		return
	}
	r.cfg.rounds.enter() // left when the round's verdict is sent
	req := roundRequest{StartRound: m, replyTo: replyTo, trace: newRoundTrace(r.cfg.TracerProvider, &m)}
	if r.cfg.Hold != nil && replyTo.Address != c.Engine().Address() {
		// The caller's address stays reachable (keepalives, no idle close)
		// until the verdict, however long the round runs.
		req.release = r.cfg.Hold(replyTo.Address)
	}
	r.sendUser(c, m.User, req, c.PID())
}

// attach hands an AttachRound to its user's actor, with its reply target
// held like a round's; a user with no actor has no round to attach to.
func (r *rootActor) attach(c *actor.Context, m messages.AttachRound) {
	replyTo := toPID(m.ReplyTo)
	if replyTo != nil && (c.Sender() == nil || c.Sender().Address != replyTo.Address) {
		r.reject(c, fmt.Errorf("%w: reply_to must be on the sender's node (%s)", messages.ErrInvalid, pidString(c.Sender())))
		return
	}
	if replyTo == nil {
		replyTo = c.Sender()
	}
	err := m.Validate()
	if err == nil {
		err = store.ValidateUserID(m.User)
	}
	if err != nil || replyTo == nil {
		r.reject(c, err)
		return
	}
	// In a cluster the round runs on the user's owner: a caller attached
	// to another member is relayed there, like a round.
	r.place(c, m.User, m, replyTo, func(c *actor.Context) { r.attachHere(c, m, replyTo) })
}

// detach hands a DetachRound to its user's actor, if this member runs
// one: it is never placed or relayed (a detach must not claim a user, nor
// reach a round the sender did not attach to here), and nothing answers
// it. The round log detaches the sender only.
func (r *rootActor) detach(c *actor.Context, m messages.DetachRound) {
	if err := m.Validate(); err != nil {
		r.reject(c, err)
		return
	}
	if u := r.users[m.User]; u != nil && !u.stopping && c.Sender() != nil {
		c.Engine().SendWithSender(u.pid, m, c.Sender())
	}
}

// attachHere hands an AttachRound placed here to its user's actor.
func (r *rootActor) attachHere(c *actor.Context, m messages.AttachRound, replyTo *actor.PID) {
	if u := r.users[m.User]; u == nil || u.stopping {
		r.unclaim(m.User)
		deliver(c.Engine(), replyTo, notFound(m.RoundID), r.log)
		return
	}
	req := attachRequest{AttachRound: m, replyTo: replyTo}
	if r.cfg.Hold != nil && replyTo.Address != c.Engine().Address() {
		req.release = r.cfg.Hold(replyTo.Address)
	}
	r.sendUser(c, m.User, req, c.PID())
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
	sender := c.Sender()
	r.place(c, userID, msg, sender, func(c *actor.Context) {
		if err := r.ensureUser(c, userID); err != nil {
			r.unclaim(userID)
			r.rejectMsg(c, msg, sender, err)
			return
		}
		r.sendUser(c, userID, msg, sender)
	})
}

func (r *rootActor) forward(c *actor.Context, userID string, msg any) {
	if err := store.ValidateUserID(userID); err != nil {
		r.reject(c, err)
		return
	}
	sender := c.Sender()
	r.place(c, userID, msg, sender, func(c *actor.Context) {
		if r.users[userID] == nil {
			r.unclaim(userID)
			deliver(c.Engine(), sender, messages.RoundControlled{Error: "no running round for that user"}, r.log)
			return
		}
		r.sendUser(c, userID, msg, sender)
	})
}

// ensureUser makes sure the user has an actor (or one on its way),
// spawning it on the user's first message unless the node is at MaxUsers.
func (r *rootActor) ensureUser(c *actor.Context, id string) error {
	if r.users[id] != nil {
		return nil
	}
	if len(r.users) >= r.cfg.MaxUsers {
		return fmt.Errorf("%w: the node is at its cap of %d live users; try again later", errUserCap, r.cfg.MaxUsers)
	}
	home, err := homeFor(r.cfg, id)
	if err != nil {
		return err
	}
	r.spawnUser(c, id, home)
	return nil
}

func (r *rootActor) spawnUser(c *actor.Context, id, home string) {
	r.cfg.Metrics.Users.Inc()
	pid := c.SpawnChild(newUserActor(r.cfg, id, home, r.cap), "user", spawnOpts(id, r.log, nil)...)
	r.users[id] = &userEntry{pid: pid, fenced: new(atomic.Bool)}
}

// sendUser hands msg (from sender) to the user's actor, or keeps it for
// the next one while a reaped actor stops.
func (r *rootActor) sendUser(c *actor.Context, id string, msg any, sender *actor.PID) {
	u := r.users[id]
	if u.stopping {
		if len(u.pending) >= maxPending {
			if req, ok := msg.(roundRequest); ok {
				deliver(c.Engine(), req.replyTo, messages.RoundFinished{RoundID: req.RoundID, Thread: req.Thread,
					Status: messages.StatusBusy, Error: "too many messages for this user at once"}, r.log)
				r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusBusy)).Inc()
				req.settle(r.cfg)
			}
			return
		}
		u.pending = append(u.pending, pendingMsg{msg: msg, sender: sender})
		return
	}
	if req, ok := msg.(roundRequest); ok {
		req.fenced = u.fenced // this actor's, not a fenced predecessor's
		msg = req
	}
	u.sent++
	c.Engine().SendWithSender(u.pid, msg, sender)
}

// reap stops an idle user actor, unless a message is on its way to it.
func (r *rootActor) reap(c *actor.Context, m userIdle) {
	u := r.users[m.user]
	if u == nil || u.stopping || !u.pid.Equals(m.pid) || u.sent != m.received {
		return
	}
	u.stopping = true
	r.log.Debug("reaping an idle user actor", "user", userTag(m.user))
	r.cfg.Metrics.UserReaps.Inc()
	c.Engine().BroadcastEvent(UserReaped{User: m.user})
	c.Engine().Poison(u.pid)
}

// gone forgets a stopped user actor, and starts the next one if messages
// wait for it.
func (r *rootActor) gone(c *actor.Context, m userGone) {
	u := r.users[m.user]
	if u == nil || !u.pid.Equals(m.pid) {
		return
	}
	delete(r.users, m.user)
	r.fenceGone(m.user, m.pid)
	if len(u.pending) == 0 {
		r.unclaim(m.user)
		return
	}
	if !r.draining && !r.ownedHere(m.user) {
		r.failPending(c, u.pending, "the user's ownership moved while its messages waited; send them again")
		return
	}
	if r.draining {
		// Stopping: no new actor. Admitted rounds still get a verdict.
		for _, p := range u.pending {
			if req, ok := p.msg.(roundRequest); ok {
				deliver(c.Engine(), req.replyTo, messages.RoundFinished{RoundID: req.RoundID, Thread: req.Thread,
					Status: messages.StatusUnavailable, Error: "the daemon is shutting down"}, r.log)
				r.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusUnavailable)).Inc()
				req.settle(r.cfg)
			}
		}
		return
	}
	home, err := homeFor(r.cfg, m.user)
	if err != nil {
		return // cannot happen: the id was valid when the first actor started
	}
	r.spawnUser(c, m.user, home)
	for _, p := range u.pending {
		r.sendUser(c, m.user, p.msg, p.sender)
	}
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
