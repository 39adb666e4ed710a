package actors

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// userActor supervises one user: it owns the codex, registry and login
// actors and one round actor per round in flight, and it admits rounds:
// one runs per mesh thread at a time, up to QueueLimit more wait in order,
// and past that a round gets a busy verdict at once.
type userActor struct {
	cfg  *Config
	user string
	home string
	log  *slog.Logger

	codex    *actor.PID
	cap      *actor.PID // the node's cap actor, for the app-server actor
	appLive  bool       // the app-server actor has a live process
	registry *actor.PID
	login    *actor.PID
	threads  map[string]*threadState
	seq      uint64

	// Idle reaping: what the root sent (counted), when last, and whether
	// the root was already told the actor is idle since.
	timer      *time.Timer // the next idle check (a timer, not a goroutine)
	received   uint64
	lastActive time.Time
	offered    bool
}

type threadState struct {
	active  *actor.PID
	roundID string
	queue   []roundRequest
}

func newUserActor(cfg *Config, user, home string, cap *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &userActor{
			cfg: cfg, user: user, home: home, cap: cap,
			log:     cfg.Logger.With("user", userTag(user), "actor", "user"),
			threads: make(map[string]*threadState),
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
		// hollywood has stopped the children (each running round sent its
		// verdict); the queued rounds get theirs here.
		for _, ts := range u.threads {
			for _, req := range ts.queue {
				deliver(c.Engine(), req.replyTo, messages.RoundFinished{
					RoundID: req.RoundID, Thread: req.Thread, Status: messages.StatusInterrupted,
					Error: "the daemon is stopping",
				}, u.log)
				u.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusInterrupted)).Inc()
				req.settle(u.cfg)
			}
			ts.queue = nil
		}
		u.cfg.Metrics.Users.Dec()
		c.Engine().Send(c.Parent(), userGone{user: u.user, pid: c.PID()})
	case userTick:
		u.checkIdle(c)
	case appServerLive:
		u.appLive = m.live
	case roundRequest:
		u.active()
		u.admit(c, m)
	case roundDone:
		u.roundDone(c, m)
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
	case messages.WarmUp:
		u.active()
		c.Send(u.codex, warmUp{key: m.Thread, reply: c.Sender(), secrets: []string{m.MCPToken},
			settings: roundSettings(u.cfg, m.DeveloperInstructions, m.MCPURL, m.MCPToken)})
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
	if u.offered || len(u.threads) > 0 || u.appLive {
		u.timer.Reset(tickInterval(u.cfg.UserIdle))
		return
	}
	u.offered = true
	u.timer.Reset(tickInterval(u.cfg.UserIdle)) // the root may decline
	c.Engine().Send(c.Parent(), userIdle{user: u.user, pid: c.PID(), received: u.received})
}

func (u *userActor) admit(c *actor.Context, req roundRequest) {
	ts := u.threads[req.Thread]
	if ts == nil {
		ts = &threadState{}
		u.threads[req.Thread] = ts
	}
	if ts.active == nil {
		u.startRound(c, ts, req)
		return
	}
	if len(ts.queue) >= u.cfg.QueueLimit {
		deliver(c.Engine(), req.replyTo, messages.RoundFinished{
			RoundID: req.RoundID, Thread: req.Thread, Status: messages.StatusBusy,
			Error: fmt.Sprintf("%d rounds already wait on this mesh thread", len(ts.queue)),
		}, u.log)
		u.cfg.Metrics.Rounds.WithLabelValues(string(messages.StatusBusy)).Inc()
		req.settle(u.cfg)
		return
	}
	ts.queue = append(ts.queue, req)
}

func (u *userActor) startRound(c *actor.Context, ts *threadState, req roundRequest) {
	u.seq++
	// The actor id is ours, not the caller's round id: it must be unique
	// and free of path separators whatever the caller sends.
	id := "r" + strconv.FormatUint(u.seq, 10)
	ts.active = c.SpawnChild(newRoundActor(u.cfg, req, u.codex, u.registry), "round",
		spawnOpts(id, u.log, roundPanicked)...)
	ts.roundID = req.RoundID
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

// control forwards an interrupt or steer to the thread's running round.
func (u *userActor) control(c *actor.Context, thread, roundID string) {
	ts := u.threads[thread]
	if ts == nil || ts.active == nil || (roundID != "" && roundID != ts.roundID) {
		deliver(c.Engine(), c.Sender(), messages.RoundControlled{RoundID: roundID,
			Error: "no running round on that mesh thread"}, u.log)
		return
	}
	c.Engine().SendWithSender(ts.active, c.Message(), c.Sender())
}

// homeFor is a user's CODEX_HOME under the homes root.
func homeFor(cfg *Config, user string) (string, error) {
	return store.HomeDir(cfg.Homes, user)
}
