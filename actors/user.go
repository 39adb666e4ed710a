package actors

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// userActor supervises one user: it owns the codex, registry and login
// actors and one round actor per round in flight, and it admits rounds:
// one runs per mesh thread at a time, up to QueueLimit more wait in order,
// and past that a round gets a busy verdict at once.
type userActor struct {
	userWiring
	appLive bool // the app-server actor has a live process
	threads map[string]*threadState
	seq     uint64
	roundBook
	idleReap
}

// userWiring is the user and the actors a user actor talks to.
type userWiring struct {
	cfg      *tree
	user     string
	home     string
	log      *slog.Logger
	codex    *actor.PID
	cap      *actor.PID // the node's cap actor, for the app-server actor
	registry *actor.PID
	login    *actor.PID
}

// roundBook holds the user's rounds by round id (and by the ids of
// repeats attached to them), by dedupe key, and the finished ones oldest
// first (bounded by KeptRounds and UserLogBytes).
type roundBook struct {
	rounds   map[string]*keptRound
	byMsg    map[string]string
	finished []string
	kept     int // bytes the finished rounds' logs keep
}

// idleReap is what the root sent (counted), when last, and whether the
// root was already told the actor is idle since.
type idleReap struct {
	timer      *time.Timer // the next idle check (a timer, not a goroutine)
	received   uint64
	lastActive time.Time
	offered    bool
}

type threadState struct {
	active  *actor.PID // the running round's log
	roundID string
	queue   []queuedRound
}

// queuedRound is an admitted round waiting for its thread, with its log.
type queuedRound struct {
	roundID string
	log     *actor.PID
}

// keptRound is a round the user actor knows: running, queued, or finished
// and kept for RoundRetention.
type keptRound struct {
	log      *actor.PID
	thread   string
	dedupe   string // its (thread, client message id) key; "" when none
	aliases  []string
	finished bool
	bytes    int
}

// dedupeKey is what makes two StartRounds the same message.
func dedupeKey(m messages.StartRound) string {
	if m.ClientMessageID == "" {
		return ""
	}
	return m.Thread + "\x00" + m.ClientMessageID
}

func newUserActor(cfg *tree, user, home string, cap *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &userActor{
			userWiring: userWiring{cfg: cfg, user: user, home: home, cap: cap,
				log: cfg.Logger.With("user", userTag(user), "actor", "user")},
			threads:   make(map[string]*threadState),
			roundBook: roundBook{rounds: make(map[string]*keptRound), byMsg: make(map[string]string)},
		}
	}
}

func (u *userActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		creds := store.NewCredentials(filepath.Join(filepath.Dir(u.home), "meshweaver"))
		u.registry = c.SpawnChild(newRegistryActor(u.cfg, u.user, u.home), "registry", spawnOpts("main", u.log, nil)...)
		u.codex = c.SpawnChild(newAppServerActor(u.cfg, u.user, u.home, creds, u.registry, u.cap), "codex", spawnOpts("main", u.log, nil)...)
		u.login = c.SpawnChild(newLoginActor(u.cfg, u.user, u.home, u.codex, creds), "login", spawnOpts("main", u.log, nil)...)
		c.Send(u.codex, loginIs{pid: u.login})
		u.lastActive = time.Now()
		e, self := c.Engine(), c.PID()
		u.timer = time.AfterFunc(u.cfg.UserIdle, func() { e.Send(self, userTick{}) })
	case actor.Stopped:
		u.timer.Stop()
		// hollywood has stopped the children: every round's log, queued
		// ones too, sent its callers a verdict.
		u.cfg.Metrics.Users.Dec()
		c.Engine().Send(c.Parent(), userGone{user: u.user, pid: c.PID()})
	case userTick:
		u.checkIdle(c)
	case appServerLive:
		u.appLive = m.live
	case budgetMet: // from the registry: the app-server actor stops the running turns
		c.Send(u.codex, m)
	case roundRequest:
		u.active()
		u.admit(c, m)
	case roundDone:
		u.roundDone(c, m)
	case attachRequest:
		u.active()
		u.attach(c, m)
	case messages.DetachRound: // not activity: a departure keeps no user alive
		if k := u.rounds[m.RoundID]; k != nil {
			c.Engine().SendWithSender(k.log, m, c.Sender())
		}
	case logFinished:
		u.logFinished(c, m)
	case logExpired:
		u.forget(c, m.roundID)
	case dropQueued:
		u.dropQueued(c, m)
	case messages.AnswerRequest:
		u.active()
		if k := u.rounds[m.RoundID]; k != nil {
			c.Engine().SendWithSender(k.log, m, c.Sender())
			return
		}
		deliver(c.Engine(), c.Sender(), messages.RoundControlled{RoundID: m.RoundID, Error: "no such round", NotFound: true}, u.log)
	case messages.ToolCallResult: // a tool server's answer: its round's log matches it to the call
		if k := u.rounds[m.RoundID]; k != nil {
			c.Engine().SendWithSender(k.log, m, c.Sender())
		}
	case messages.InterruptRound:
		u.active()
		u.control(c, m.Thread, m.RoundID)
	case messages.SteerRound:
		u.active()
		u.control(c, m.Thread, m.RoundID)
	case messages.StartLogin, messages.CancelLogin, messages.SetAPIKey, messages.Logout,
		messages.AccountRequest, messages.ModelsRequest, messages.RateLimitsRequest:
		u.active()
		c.Engine().SendWithSender(u.login, m, c.Sender())
	case messages.ListThreads:
		u.active()
		c.Engine().SendWithSender(u.registry, m, c.Sender())
	case messages.UsageRequest, messages.CodexRequest:
		u.active()
		c.Engine().SendWithSender(u.codex, m, c.Sender())
	case messages.ReadThread, messages.ArchiveThread, messages.ForkThread, messages.CompactThread:
		u.active()
		u.threadOp(c, m)
	case messages.WarmUp:
		u.active()
		c.Send(u.codex, warmUp{key: m.Thread, reply: c.Sender(), secrets: []string{m.MCPToken},
			settings: roundSettings(u.cfg, mcpfront.Key{User: u.user, Thread: m.Thread}, m.DeveloperInstructions, m.MCPURL, m.MCPToken)})
	}
}

// active counts a message from the root: the actor is in use.
func (u *userActor) active() {
	u.received++
	u.lastActive = time.Now()
	u.offered = false
}

// checkIdle offers the root to reap this actor once it has had no round
// running or queued, no live app-server (a login in progress pins one) and
// no message for UserIdle. The root owns the user map, so the decision to
// stop is its own: it declines if it sent a message the actor has not
// seen yet.
func (u *userActor) checkIdle(c *actor.Context) {
	if left := u.cfg.UserIdle - time.Since(u.lastActive); left > 0 {
		u.timer.Reset(left)
		return
	}
	if u.offered || len(u.threads) > 0 || len(u.rounds) > 0 || u.appLive {
		u.timer.Reset(tickInterval(u.cfg.UserIdle))
		return
	}
	u.offered = true
	u.timer.Reset(tickInterval(u.cfg.UserIdle)) // the root may decline
	c.Engine().Send(c.Parent(), userIdle{user: u.user, pid: c.PID(), received: u.received})
}

func (u *userActor) admit(c *actor.Context, req roundRequest) {
	if u.repeat(c, req) {
		return
	}
	ts := u.threads[req.Thread]
	if ts == nil {
		ts = &threadState{}
		u.threads[req.Thread] = ts
	}
	if ts.active != nil && len(ts.queue) >= u.cfg.QueueLimit {
		v := messages.RoundFinished{
			RoundID: req.RoundID, Thread: req.Thread, Status: messages.StatusBusy,
			Error: fmt.Sprintf("%d rounds already wait on this mesh thread", len(ts.queue)),
		}
		req.trace.finished(&v)
		deliver(c.Engine(), req.replyTo, v, u.log)
		u.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusBusy)).Inc()
		req.settle(u.cfg)
		return
	}
	u.seq++
	// The actor id is ours, not the caller's round id: it must be unique
	// and free of path separators whatever the caller sends.
	id := "r" + strconv.FormatUint(u.seq, 10)
	log := c.SpawnChild(newRoundLog(u.cfg, req, id, u.codex, u.registry), "log", spawnOpts(id, u.log, nil)...)
	k := &keptRound{log: log, thread: req.Thread, dedupe: dedupeKey(req.StartRound)}
	u.rounds[req.RoundID] = k
	if k.dedupe != "" {
		u.byMsg[k.dedupe] = req.RoundID
	}
	if ts.active == nil {
		u.startRound(c, ts, queuedRound{roundID: req.RoundID, log: log})
		return
	}
	ts.queue = append(ts.queue, queuedRound{roundID: req.RoundID, log: log})
}

// repeat attaches a StartRound the user actor has seen already (the same
// client message id on the thread, or the same round id) to the round it
// started, running or kept: a retried StartRound never runs twice.
func (u *userActor) repeat(c *actor.Context, req roundRequest) bool {
	id := req.RoundID
	if key := dedupeKey(req.StartRound); key != "" && u.byMsg[key] != "" {
		id = u.byMsg[key]
	}
	k := u.rounds[id]
	if k == nil {
		return false
	}
	if k.thread != req.Thread {
		deliver(c.Engine(), req.replyTo, messages.RoundFinished{
			RoundID: req.RoundID, Thread: req.Thread, Status: messages.StatusRejected,
			Error: "round_id is in use by a round on another mesh thread",
		}, u.log)
		u.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusRejected)).Inc()
		req.settle(u.cfg)
		return true
	}
	u.log.Info("a repeated StartRound attaches to its round", "round", id)
	req.trace.attached(id)
	u.cfg.rounds.leave() // it is no round of its own
	if req.RoundID != id && u.rounds[req.RoundID] == nil && len(k.aliases) < maxCallers {
		k.aliases = append(k.aliases, req.RoundID)
		u.rounds[req.RoundID] = k
	}
	c.Engine().Send(k.log, attachLog{to: req.replyTo, release: req.release, alias: req.RoundID})
	return true
}

// attach hands an AttachRound to its round's log; a round not known gets
// its verdict, not_found, at once.
func (u *userActor) attach(c *actor.Context, m attachRequest) {
	if k := u.rounds[m.RoundID]; k != nil {
		c.Engine().Send(k.log, attachLog{after: m.AfterSeq, to: m.replyTo, release: m.release, alias: m.RoundID})
		return
	}
	deliver(c.Engine(), m.replyTo, notFound(m.RoundID), u.log)
	if m.release != nil {
		m.release()
	}
}

// notFound is the verdict on an attach to a round nobody knows.
func notFound(roundID string) messages.RoundFinished {
	return messages.RoundFinished{RoundID: roundID, Status: messages.StatusNotFound,
		Error: "no round with that id runs or is kept for this user"}
}

func (u *userActor) startRound(c *actor.Context, ts *threadState, q queuedRound) {
	ts.active, ts.roundID = q.log, q.roundID
	c.Engine().Send(q.log, runRound{})
}

func (u *userActor) roundDone(c *actor.Context, m roundDone) {
	ts := u.threads[m.key]
	if ts == nil || ts.roundID != m.roundID {
		return
	}
	ts.active, ts.roundID = nil, ""
	if len(ts.queue) == 0 {
		delete(u.threads, m.key)
		return
	}
	next := ts.queue[0]
	ts.queue = ts.queue[1:]
	u.startRound(c, ts, next)
}

// dropQueued takes a round whose caller is gone off its thread's queue;
// its log gives it its verdict.
func (u *userActor) dropQueued(c *actor.Context, m dropQueued) {
	ts := u.threads[m.thread]
	if ts == nil {
		return
	}
	for i, q := range ts.queue {
		if q.roundID == m.roundID {
			ts.queue = append(ts.queue[:i:i], ts.queue[i+1:]...)
			u.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusInterrupted)).Inc()
			c.Engine().Send(q.log, messages.RoundFinished{RoundID: m.roundID, Thread: m.thread,
				Status: messages.StatusInterrupted, Error: "the caller was gone for the caller grace; the round never ran"})
			return
		}
	}
}

// logFinished counts a finished round against the user's bounds: past
// KeptRounds rounds or UserLogBytes bytes, the oldest are forgotten.
func (u *userActor) logFinished(c *actor.Context, m logFinished) {
	k := u.rounds[m.roundID]
	if k == nil || k.finished {
		return
	}
	k.finished, k.bytes = true, m.bytes
	u.finished = append(u.finished, m.roundID)
	u.kept += m.bytes
	for len(u.finished) > 0 && (len(u.finished) > u.cfg.KeptRounds || u.kept > u.cfg.UserLogBytes) {
		u.forget(c, u.finished[0])
	}
}

// forget stops a finished round's log and drops what names it.
func (u *userActor) forget(c *actor.Context, roundID string) {
	k := u.rounds[roundID]
	if k == nil || !k.finished {
		return
	}
	delete(u.rounds, roundID)
	for _, a := range k.aliases {
		delete(u.rounds, a)
	}
	if k.dedupe != "" && u.byMsg[k.dedupe] == roundID {
		delete(u.byMsg, k.dedupe)
	}
	for i, id := range u.finished {
		if id == roundID {
			u.finished = append(u.finished[:i:i], u.finished[i+1:]...)
			break
		}
	}
	u.kept -= k.bytes
	c.Engine().Poison(k.log)
}

// control forwards an interrupt or steer to the thread's running round.
func (u *userActor) control(c *actor.Context, thread, roundID string) {
	ts := u.threads[thread]
	if k := u.rounds[roundID]; k != nil && ts != nil && ts.active != nil && k.log.Equals(ts.active) {
		roundID = ts.roundID // a repeat's id names its round
	}
	if ts == nil || ts.active == nil || (roundID != "" && roundID != ts.roundID) {
		deliver(c.Engine(), c.Sender(), messages.RoundControlled{RoundID: roundID,
			Error: "no running round on that mesh thread"}, u.log)
		return
	}
	c.Engine().SendWithSender(ts.active, c.Message(), c.Sender())
}

// homeFor is a user's CODEX_HOME under the homes root.
func homeFor(cfg *tree, user string) (string, error) {
	return store.HomeDir(cfg.Homes, user)
}
