package actors

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/meshweaver/supervisor/actors/eventmap"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// loginActor owns a user's credentials: the ChatGPT device-code session
// (at most one; a second request joins it), the stored API key, logout,
// and the account and model queries answered by the user's own app-server.
// Its calls go to the app-server actor (appCall) and come back as
// appAnswer: it has no goroutine.
type loginActor struct {
	cfg   *tree
	user  string
	home  string // the CODEX_HOME, whose credentials it sets up
	log   *slog.Logger
	codex *actor.PID
	creds *store.Credentials

	engine *actor.Engine
	self   *actor.PID

	session  *loginSession
	seq      uint64 // start attempts made
	inflight uint64 // the start attempt awaiting the CLI's answer, if any
}

// loginSession is a device-code login in progress.
type loginSession struct {
	seq        uint64 // the start attempt that belongs to this session
	requesters []*actor.PID
	challenge  *messages.LoginChallenge // nil until the CLI answered
	timer      *time.Timer
}

// Messages the login actor sends itself.
type loginExpired struct{ loginID string }

// Tags of the login actor's calls (appCall), echoed in their answers.
type (
	loginStartCall struct{ seq uint64 }
	keyWriteCall   struct{ check uint64 } // the key check it answers; 0 for none
	logoutCall     struct{ requester *actor.PID }
	accountCall    struct{ requester *actor.PID }
	rateLimitsCall struct{ requester *actor.PID }
	modelsCall     struct {
		requester     *actor.PID
		includeHidden bool
		pages         *modelPages
	}
)

func newLoginActor(cfg *tree, user, home string, codex *actor.PID, creds *store.Credentials) actor.Producer {
	return func() actor.Receiver {
		return &loginActor{cfg: cfg, user: user, home: home, codex: codex, creds: creds,
			log: cfg.Logger.With("user", userTag(user), "actor", "login")}
	}
}

func (a *loginActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.engine, a.self = c.Engine(), c.PID()
	case actor.Stopped:
		if a.session != nil {
			a.finish(false, "the daemon is stopping")
		}
	case messages.StartLogin:
		a.startLogin(c.Sender())
	case appAnswer:
		a.answered(m)
	case keyCheck:
		a.checkKey(m.seq)
	case accountNote:
		a.accountNote(m.note)
	case codexLost:
		if a.session != nil {
			a.finish(false, "the codex app-server died during the login: "+m.err.Error())
		}
	case loginExpired:
		if a.session != nil && a.session.challenge != nil && a.session.challenge.LoginID == m.loginID {
			a.cancelCall(m.loginID)
			a.finish(false, "the login expired before it was approved")
		}
	case messages.CancelLogin:
		if a.session != nil && a.session.challenge != nil {
			// The CLI answers with account/login/completed (not completed).
			a.cancelCall(a.session.challenge.LoginID)
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

// call asks the app-server actor for a call, answered with tag; pin keeps
// the process for this actor's login session.
func (a *loginActor) call(method string, params any, tag any, pin bool) {
	a.engine.Send(a.codex, appCall{method: method, params: params, to: a.self, tag: tag, pin: pin})
}

// answered handles the answer to one of the actor's calls.
func (a *loginActor) answered(m appAnswer) {
	err := m.err
	switch tag := m.tag.(type) {
	case keyWriteCall:
		if err != nil {
			a.log.Error("writing the API key into the home", "err", err)
		} else {
			a.log.Info("API key written into the home")
			a.engine.BroadcastEvent(APIKeyWritten{User: a.user})
		}
		if tag.check != 0 {
			a.engine.Send(a.codex, keyChecked{seq: tag.check})
		}
	case loginStartCall:
		if a.inflight == tag.seq {
			a.inflight = 0
		}
		var res codexproto.LoginStartResult
		if err == nil {
			err = decodeResult(codexproto.MethodLoginStart, m.result, &res)
		}
		switch {
		case err != nil && m.unavailable:
			a.startFailed(tag.seq, unavailable(err))
		case err != nil:
			a.startFailed(tag.seq, fmt.Errorf("starting the device-code login: %w", err))
		default:
			a.started(tag.seq, messages.LoginChallenge{
				User: a.user, LoginID: res.LoginID, VerificationURL: res.VerificationURL, UserCode: res.UserCode,
				ExpiresAtUnixMilli: time.Now().Add(a.cfg.LoginGrant).UnixMilli(),
			})
		}
	case logoutCall:
		if err != nil {
			a.reply(tag.requester, failed(messages.NewRejected(messages.Logout{User: a.user}, fmt.Errorf("logging out of codex: %w", err))))
			return
		}
		a.reply(tag.requester, messages.LoggedOut{User: a.user})
	case accountCall:
		a.accountAnswered(tag.requester, m.result, err)
	case rateLimitsCall:
		a.rateLimitsAnswered(tag.requester, m.result, err)
	case modelsCall:
		a.modelsAnswered(tag, m.result, err)
	}
}

func (a *loginActor) startFailed(seq uint64, err error) {
	if a.session != nil && a.session.seq == seq && a.session.challenge == nil {
		a.finish(false, err.Error())
	}
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
		a.engine.Send(a.codex, pinClient{pin: a.self})
		return
	}
	a.seq++
	seq := a.seq
	a.inflight = seq
	a.session = &loginSession{seq: seq, requesters: []*actor.PID{requester}}
	a.call(codexproto.MethodLoginStart, codexproto.LoginStartParams{Type: codexproto.LoginDeviceCode}, loginStartCall{seq: seq}, true)
}

func (a *loginActor) started(seq uint64, challenge messages.LoginChallenge) {
	s := a.session
	if s == nil || s.seq != seq || s.challenge != nil {
		// The start of a session that has ended: nobody waits for it. (A
		// newer start, if any, has replaced it in the CLI already.)
		a.cancelCall(challenge.LoginID)
		return
	}
	s.challenge = &challenge
	engine, self, id := a.engine, a.self, challenge.LoginID
	s.timer = time.AfterFunc(a.cfg.LoginGrant, func() { engine.Send(self, loginExpired{loginID: id}) })
	a.log.Info("device-code login started", "login", id)
	for _, r := range s.requesters {
		a.reply(r, challenge)
	}
}

func (a *loginActor) accountNote(n *codexrpc.Notification) {
	if n.Method != codexproto.NoteLoginCompleted || a.session == nil || a.session.challenge == nil {
		return
	}
	var done codexproto.LoginCompleted
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

func (a *loginActor) cancelCall(loginID string) {
	if loginID == "" {
		return
	}
	a.call(codexproto.MethodLoginCancel, codexproto.LoginCancelParams{LoginID: loginID}, nil, false)
}

func (a *loginActor) setAPIKey(requester *actor.PID, m messages.SetAPIKey) {
	if err := a.creds.SaveAPIKey(m.APIKey); err != nil {
		a.reply(requester, failed(messages.NewRejected(m, err)))
		return
	}
	a.log.Info("API key stored")
	// Written into the home now when an app-server runs; otherwise by the
	// key check of the next start.
	a.writeKey(m.APIKey, 0)
	a.reply(requester, messages.APIKeyStored{User: a.user})
}

// checkKey answers the app-server actor's key check: a stored API key
// that the home does not hold is written into it first.
func (a *loginActor) checkKey(seq uint64) {
	key, ok, err := a.creds.APIKey()
	if err != nil {
		a.log.Error("reading the stored API key", "err", err)
	}
	if _, serr := os.Stat(filepath.Join(a.home, "auth.json")); err != nil || !ok || serr == nil {
		a.engine.Send(a.codex, keyChecked{seq: seq})
		return
	}
	a.writeKey(key, seq)
}

// writeKey writes key into the home through the app-server (account/login/
// start with the key): at once on the live process, answering key check
// seq when it is not 0; with no live process, not at all.
func (a *loginActor) writeKey(key string, seq uint64) {
	a.engine.Send(a.codex, appCall{method: codexproto.MethodLoginStart, to: a.self, tag: keyWriteCall{check: seq},
		params: codexproto.LoginStartParams{Type: codexproto.LoginAPIKey, APIKey: key}, secrets: []string{key},
		setup: true, ifLive: seq == 0})
}

func (a *loginActor) logout(requester *actor.PID) {
	if err := a.creds.Delete(); err != nil {
		a.reply(requester, failed(messages.NewRejected(messages.Logout{User: a.user}, err)))
		return
	}
	a.call(codexproto.MethodLogout, json.RawMessage("null"), logoutCall{requester: requester}, false)
}

func (a *loginActor) account(requester *actor.PID) {
	a.call(codexproto.MethodAccountRead, struct{}{}, accountCall{requester: requester}, false)
}

func (a *loginActor) accountAnswered(requester *actor.PID, raw json.RawMessage, err error) {
	resp := messages.AccountResponse{User: a.user}
	var res codexproto.AccountReadResult
	if err == nil {
		err = decodeResult(codexproto.MethodAccountRead, raw, &res)
	}
	if err != nil {
		resp.Error = err.Error()
	} else {
		resp.RequiresOpenAIAuth = res.RequiresOpenAIAuth
		if res.Account != nil {
			resp.Type, resp.Email, resp.PlanType = res.Account.Type, res.Account.Email, res.Account.PlanType
		} else if a.hasAPIKey() {
			// codex answers account:null for a provider that does not
			// require OpenAI auth, even with a key in auth.json (recorded
			// with 0.169.0); the user is logged in with the stored key.
			resp.Type = codexproto.LoginAPIKey
		}
	}
	a.reply(requester, resp)
}

// hasAPIKey reports whether the user has a stored API key.
func (a *loginActor) hasAPIKey() bool {
	_, ok, err := a.creds.APIKey()
	if err != nil {
		a.log.Error("reading the stored API key", "err", err)
	}
	return ok && err == nil
}

// rateLimits answers a RateLimitsRequest from account/rateLimits/read:
// every bucket by its limit id, else the single one.
func (a *loginActor) rateLimits(requester *actor.PID) {
	a.call(codexproto.MethodRateLimitsRead, json.RawMessage("null"), rateLimitsCall{requester: requester}, false)
}

func (a *loginActor) rateLimitsAnswered(requester *actor.PID, raw json.RawMessage, err error) {
	resp := messages.RateLimitsResponse{User: a.user}
	var res codexproto.RateLimitsResult
	if err == nil {
		err = decodeResult(codexproto.MethodRateLimitsRead, raw, &res)
	}
	if err != nil {
		resp.Error = err.Error()
		a.reply(requester, resp)
		return
	}
	if len(res.ByLimitID) == 0 {
		resp.Limits = []messages.RateLimit{eventmap.RateLimit(res.RateLimits)}
	}
	for _, id := range slices.Sorted(maps.Keys(res.ByLimitID)) {
		l := eventmap.RateLimit(res.ByLimitID[id])
		if l.LimitID == "" {
			l.LimitID = id
		}
		resp.Limits = append(resp.Limits, l)
	}
	a.reply(requester, resp)
}

// modelPages is a model/list read in progress: every page, following
// nextCursor (see codexproto.Client.ModelListAll, whose checks it keeps).
type modelPages struct {
	params codexproto.ModelListParams
	all    []codexproto.ModelInfo
	seen   map[string]bool
	n      int
}

func (a *loginActor) models(requester *actor.PID, includeHidden bool) {
	tag := modelsCall{requester: requester, includeHidden: includeHidden,
		pages: &modelPages{params: codexproto.ModelListParams{IncludeHidden: includeHidden}, seen: map[string]bool{}}}
	a.call(codexproto.MethodModelList, tag.pages.params, tag, false)
}

func (a *loginActor) modelsAnswered(tag modelsCall, raw json.RawMessage, err error) {
	p := tag.pages
	var res codexproto.ModelListResult
	if err == nil {
		err = decodeResult(codexproto.MethodModelList, raw, &res)
	}
	p.n++
	switch {
	case err != nil && p.params.Cursor != nil:
		err = fmt.Errorf("model/list at cursor %q: %w", *p.params.Cursor, err)
	case err != nil:
	case res.NextCursor == nil:
		p.all = append(p.all, res.Data...)
	case p.seen[*res.NextCursor]:
		err = fmt.Errorf("model/list repeated the cursor %q", *res.NextCursor)
	case p.n >= codexproto.MaxModelPages:
		err = fmt.Errorf("model/list has more than %d pages", codexproto.MaxModelPages)
	default:
		p.all = append(p.all, res.Data...)
		p.seen[*res.NextCursor] = true
		p.params.Cursor = res.NextCursor
		a.call(codexproto.MethodModelList, p.params, tag, false)
		return
	}
	resp := messages.ModelsResponse{User: a.user}
	var models []codexproto.ModelInfo
	if err != nil {
		resp.Error = err.Error()
	} else {
		models = p.all
	}
	for _, m := range models {
		if m.Hidden && !tag.includeHidden {
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
	a.reply(tag.requester, resp)
}

// failed is a Rejected for a message the daemon could not carry out.
func failed(r messages.Rejected) messages.Rejected {
	r.Class = messages.RefusalFailed
	return r
}
