package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// loginActor owns a user's credentials: the ChatGPT device-code session
// (at most one; a second request joins it), the stored API key, logout,
// and the account and model queries answered by the user's own app-server.
// Calls run on goroutines it owns and report back by message.
type loginActor struct {
	cfg   *Config
	user  string
	log   *slog.Logger
	codex *actor.PID
	creds *store.Credentials

	engine *actor.Engine
	self   *actor.PID

	session  *loginSession
	seq      uint64 // start attempts made
	inflight uint64 // the start attempt awaiting the CLI's answer, if any
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// loginSession is a device-code login in progress.
type loginSession struct {
	seq        uint64 // the start attempt that belongs to this session
	requesters []*actor.PID
	challenge  *messages.LoginChallenge // nil until the CLI answered
	client     *codexrpc.Client
	timer      *time.Timer
}

// Messages the login actor sends itself.
type loginStarted struct {
	seq       uint64
	challenge messages.LoginChallenge
	client    *codexrpc.Client
}
type loginStartFailed struct {
	seq uint64
	err error
}
type loginExpired struct{ loginID string }

func newLoginActor(cfg *Config, user string, codex *actor.PID, creds *store.Credentials) actor.Producer {
	return func() actor.Receiver {
		return &loginActor{cfg: cfg, user: user, codex: codex, creds: creds,
			log: cfg.Logger.With("user", userTag(user), "actor", "login")}
	}
}

func (a *loginActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.engine, a.self = c.Engine(), c.PID()
		a.ctx, a.cancel = context.WithCancel(context.Background())
	case actor.Stopped:
		if a.session != nil {
			a.finish(false, "the daemon is stopping")
		}
		a.cancel()
		a.wg.Wait()
	case messages.StartLogin:
		a.startLogin(c.Sender())
	case loginStarted:
		if a.inflight == m.seq {
			a.inflight = 0
		}
		a.started(m)
	case loginStartFailed:
		if a.inflight == m.seq {
			a.inflight = 0
		}
		if a.session != nil && a.session.seq == m.seq && a.session.challenge == nil {
			a.finish(false, m.err.Error())
		}
	case accountNote:
		a.accountNote(m.note)
	case codexLost:
		if a.session != nil {
			a.finish(false, "the codex app-server died during the login: "+m.err.Error())
		}
	case loginExpired:
		if a.session != nil && a.session.challenge != nil && a.session.challenge.LoginID == m.loginID {
			a.cancelCall(a.session.client, m.loginID)
			a.finish(false, "the login expired before it was approved")
		}
	case messages.CancelLogin:
		if a.session != nil && a.session.challenge != nil {
			// The CLI answers with account/login/completed (not completed).
			a.cancelCall(a.session.client, a.session.challenge.LoginID)
		} else if a.session != nil {
			a.finish(false, "the login was cancelled")
		}
	case messages.SetAPIKey:
		a.setAPIKey(c.Sender(), m)
	case messages.Logout:
		a.logout(c.Sender())
	case messages.AccountRequest:
		a.account(c.Sender())
	case messages.ModelsRequest:
		a.models(c.Sender(), m.IncludeHidden)
	case messages.RateLimitsRequest:
		a.rateLimits(c.Sender())
	}
}

func (a *loginActor) reply(to *actor.PID, msg any) { deliver(a.engine, to, msg, a.log) }

// goCall runs f on a goroutine of the actor's with a ready client, pinned
// to this actor when pin is set.
func (a *loginActor) goCall(pin bool, f func(ctx context.Context, client *codexrpc.Client, err error)) {
	var pinPID *actor.PID
	if pin {
		pinPID = a.self
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ready, err := ask(a.ctx, acquireWait(a.cfg), a.engine, a.codex, func(ch chan clientReady) any {
			return acquireClient{lease: true, pin: pinPID, reply: ch}
		})
		if err == nil {
			err = ready.err
		}
		if err == nil {
			defer a.engine.Send(a.codex, releaseClient{gen: ready.gen})
		}
		ctx, cancel := context.WithTimeout(a.ctx, a.cfg.CallTimeout)
		defer cancel()
		f(ctx, ready.client, err)
	}()
}

func (a *loginActor) startLogin(requester *actor.PID) {
	if s := a.session; s != nil {
		s.requesters = append(s.requesters, requester)
		if s.challenge != nil {
			a.reply(requester, *s.challenge)
		}
		return
	}
	if a.inflight != 0 {
		// The CLI holds one login per process, and each start replaces the
		// one before: a second start while one is on its way could be
		// overtaken by it. The new session adopts the start in flight.
		a.session = &loginSession{seq: a.inflight, requesters: []*actor.PID{requester}}
		a.engine.Send(a.codex, acquireClient{pin: a.self, reply: make(chan clientReady, 1)})
		return
	}
	a.seq++
	seq := a.seq
	a.inflight = seq
	a.session = &loginSession{seq: seq, requesters: []*actor.PID{requester}}
	a.goCall(true, func(ctx context.Context, client *codexrpc.Client, err error) {
		if err != nil {
			a.engine.Send(a.self, loginStartFailed{seq: seq, err: unavailable(err)})
			return
		}
		res, err := client.LoginStart(ctx, codexrpc.LoginStartParams{Type: codexrpc.LoginDeviceCode})
		if err != nil {
			a.engine.Send(a.self, loginStartFailed{seq: seq, err: fmt.Errorf("starting the device-code login: %w", err)})
			return
		}
		a.engine.Send(a.self, loginStarted{seq: seq, client: client, challenge: messages.LoginChallenge{
			User: a.user, LoginID: res.LoginID, VerificationURL: res.VerificationURL, UserCode: res.UserCode,
			ExpiresAtUnixMilli: time.Now().Add(a.cfg.LoginGrant).UnixMilli(),
		}})
	})
}

func (a *loginActor) started(m loginStarted) {
	s := a.session
	if s == nil || s.seq != m.seq || s.challenge != nil {
		// The start of a session that has ended: nobody waits for it. (A
		// newer start, if any, has replaced it in the CLI already.)
		a.cancelCall(m.client, m.challenge.LoginID)
		return
	}
	s.challenge, s.client = &m.challenge, m.client
	engine, self, id := a.engine, a.self, m.challenge.LoginID
	s.timer = time.AfterFunc(a.cfg.LoginGrant, func() { engine.Send(self, loginExpired{loginID: id}) })
	a.log.Info("device-code login started", "login", id)
	for _, r := range s.requesters {
		a.reply(r, m.challenge)
	}
}

func (a *loginActor) accountNote(n *codexrpc.Notification) {
	if n.Method != codexrpc.NoteLoginCompleted || a.session == nil || a.session.challenge == nil {
		return
	}
	var done codexrpc.LoginCompleted
	if json.Unmarshal(n.Params, &done) != nil {
		return
	}
	if done.LoginID != nil && *done.LoginID != a.session.challenge.LoginID {
		return
	}
	reason := ""
	if done.Error != nil {
		reason = *done.Error
	}
	if !done.Success && reason == "" {
		reason = "the login failed"
	}
	a.finish(done.Success, reason)
}

// finish ends the session: every requester learns the outcome, the timer
// stops and the process is no longer pinned.
func (a *loginActor) finish(success bool, reason string) {
	s := a.session
	a.session = nil
	if s.timer != nil {
		s.timer.Stop()
	}
	id := ""
	if s.challenge != nil {
		id = s.challenge.LoginID
	}
	a.log.Info("device-code login finished", "login", id, "success", success, "reason", reason)
	outcome := "failure"
	if success {
		outcome = "success"
	}
	a.cfg.Metrics.Logins.WithLabelValues(outcome).Inc()
	for _, r := range s.requesters {
		a.reply(r, messages.LoginFinished{User: a.user, LoginID: id, Success: success, Error: reason})
	}
	a.engine.Send(a.codex, unpinClient{pin: a.self})
}

func (a *loginActor) cancelCall(client *codexrpc.Client, loginID string) {
	if client == nil || loginID == "" {
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(a.ctx, a.cfg.CallTimeout)
		defer cancel()
		if _, err := client.LoginCancel(ctx, loginID); err != nil {
			a.log.Debug("cancelling the login", "err", err)
		}
	}()
}

func (a *loginActor) setAPIKey(requester *actor.PID, m messages.SetAPIKey) {
	if err := a.creds.SaveAPIKey(m.APIKey); err != nil {
		a.reply(requester, messages.NewRejected(m, err))
		return
	}
	a.log.Info("API key stored")
	a.engine.Send(a.codex, applyAPIKey{})
	a.reply(requester, messages.APIKeyStored{User: a.user})
}

func (a *loginActor) logout(requester *actor.PID) {
	if err := a.creds.Delete(); err != nil {
		a.reply(requester, messages.NewRejected(messages.Logout{User: a.user}, err))
		return
	}
	a.goCall(false, func(ctx context.Context, client *codexrpc.Client, err error) {
		if err == nil {
			err = client.Logout(ctx)
		}
		if err != nil {
			a.reply(requester, messages.NewRejected(messages.Logout{User: a.user}, fmt.Errorf("logging out of codex: %w", err)))
			return
		}
		a.reply(requester, messages.LoggedOut{User: a.user})
	})
}

func (a *loginActor) account(requester *actor.PID) {
	a.goCall(false, func(ctx context.Context, client *codexrpc.Client, err error) {
		resp := messages.AccountResponse{User: a.user}
		var res codexrpc.AccountReadResult
		if err == nil {
			res, err = client.AccountRead(ctx)
		}
		if err != nil {
			resp.Error = err.Error()
		} else {
			resp.RequiresOpenAIAuth = res.RequiresOpenAIAuth
			if res.Account != nil {
				resp.Type, resp.Email, resp.PlanType = res.Account.Type, res.Account.Email, res.Account.PlanType
			}
		}
		a.reply(requester, resp)
	})
}

// rateLimits answers a RateLimitsRequest from account/rateLimits/read:
// every bucket by its limit id, else the single one.
func (a *loginActor) rateLimits(requester *actor.PID) {
	a.goCall(false, func(ctx context.Context, client *codexrpc.Client, err error) {
		resp := messages.RateLimitsResponse{User: a.user}
		var res codexrpc.RateLimitsResult
		if err == nil {
			res, err = client.RateLimits(ctx)
		}
		if err != nil {
			resp.Error = err.Error()
			a.reply(requester, resp)
			return
		}
		if len(res.ByLimitID) == 0 {
			resp.Limits = []messages.RateLimit{rateLimit(res.RateLimits)}
		}
		for _, id := range slices.Sorted(maps.Keys(res.ByLimitID)) {
			l := rateLimit(res.ByLimitID[id])
			if l.LimitID == "" {
				l.LimitID = id
			}
			resp.Limits = append(resp.Limits, l)
		}
		a.reply(requester, resp)
	})
}

func (a *loginActor) models(requester *actor.PID, includeHidden bool) {
	a.goCall(false, func(ctx context.Context, client *codexrpc.Client, err error) {
		resp := messages.ModelsResponse{User: a.user}
		var models []codexrpc.ModelInfo
		if err == nil {
			models, err = client.ModelListAll(ctx, includeHidden)
		}
		if err != nil {
			resp.Error = err.Error()
		}
		for _, m := range models {
			if m.Hidden && !includeHidden {
				continue
			}
			mm := messages.Model{ID: m.ID, DisplayName: m.DisplayName, Description: m.Description,
				DefaultEffort: m.DefaultReasoningEffort, IsDefault: m.IsDefault,
				InputModalities: m.InputModalities, Hidden: m.Hidden}
			for _, e := range m.SupportedReasoningEfforts {
				mm.Efforts = append(mm.Efforts, e.ReasoningEffort)
			}
			resp.Models = append(resp.Models, mm)
		}
		a.reply(requester, resp)
	})
}
