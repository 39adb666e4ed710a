package actors

// The app-server actor's threads: opening them for rounds and warm-ups
// (resume, start, or as loaded), unloading idle ones, routing their
// notifications and answering their server requests.

import (
	"encoding/json"
	"errors"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/actors/eventmap"
	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// loadedThread is a thread the current process holds, with the settings
// it was loaded with.
type loadedThread struct {
	fingerprint string
	model       string // as thread/start or thread/resume answered
	lastUse     time.Time
	key         mcpfront.Key // its mesh thread's front key
	front       bool         // it was given key's front URL
}

// open resumes or starts a thread for a round. A thread this process holds
// with the same settings is the round's at once: no unload, no resume. A
// thread held with other settings is unloaded first (a loaded thread
// ignores a resume's settings) and resumed with the round's; a refused
// resume is the round's to handle (it starts afresh with a transcript).
func (a *appServerActor) open(m openThread) {
	m, err := a.bindOpen(m)
	if err != nil {
		a.openFailed(m, err)
		return
	}
	fp := m.settings.fingerprint()
	if m.threadID == "" {
		a.call(codexproto.MethodThreadStart, traced(codexproto.ThreadStartParams{
			Cwd: m.settings.Cwd, Sandbox: m.settings.Sandbox, ApprovalPolicy: m.settings.ApprovalPolicy,
			DeveloperInstructions: m.settings.DeveloperInstructions, Config: m.settings.Config,
			DynamicTools: m.settings.DynamicTools,
		}, m.trace), "", func(res json.RawMessage, err error) {
			var t codexproto.ThreadResult
			if err == nil {
				err = decodeResult(codexproto.MethodThreadStart, res, &t)
			}
			if err != nil {
				a.openFailed(m, err)
				return
			}
			a.opened(m, t.Thread.ID, t.Model, fp, false)
		})
		return
	}
	if lt, ok := a.threads.loaded[m.threadID]; ok && lt.fingerprint == fp && m.round != nil {
		a.cfg.Metrics.WarmThreads.Inc()
		a.opened(m, m.threadID, lt.model, fp, true)
		return
	}
	a.resume(m, fp)
}

// resume unloads threadID (not loaded is fine) and resumes it with the
// settings of m.
func (a *appServerActor) resume(m openThread, fp string) {
	id := m.threadID
	gen := a.gen
	a.call(codexproto.MethodThreadUnsub, codexproto.ThreadReadParams{ThreadID: id}, id, func(_ json.RawMessage, err error) {
		if err != nil && !errors.Is(err, codexrpc.ErrClosed) {
			a.log.Debug("unsubscribing the thread before resuming it", "err", err)
		}
		if gen != a.gen || !a.phase.live() {
			if err == nil {
				err = errors.New("the codex app-server restarted while the thread was opening")
			}
			a.openFailed(m, err)
			return
		}
		a.unload(id)
		// What the thread says from here on (its MCP servers' startup) is
		// this round's: the unsubscribe's answer came after anything the
		// thread said before.
		a.threads.router.reopen(id)
		a.call(codexproto.MethodThreadResume, traced(codexproto.ThreadResumeParams{
			ThreadID: id, Cwd: m.settings.Cwd, Sandbox: m.settings.Sandbox,
			ApprovalPolicy: m.settings.ApprovalPolicy, DeveloperInstructions: m.settings.DeveloperInstructions,
			Config: m.settings.Config, ExcludeTurns: true,
		}, m.trace), id, func(res json.RawMessage, err error) {
			if err != nil {
				a.openFailed(m, err)
				return
			}
			var t codexproto.ThreadResult
			_ = json.Unmarshal(res, &t) // the model is informational
			a.cfg.Metrics.ThreadResumes.Inc()
			a.opened(m, id, t.Model, fp, false)
		})
	})
}

// opened records a loaded thread and subscribes the round to it: the
// round hears of its thread first, then what the thread said before.
func (a *appServerActor) opened(m openThread, threadID, model, fp string, warm bool) {
	a.threads.loaded[threadID] = loadedThread{fingerprint: fp, model: model, lastUse: time.Now(), key: m.settings.mcp.key, front: m.settings.mcp.bound}
	a.unbindOpen(m)
	if m.round == nil { // a warm-up
		a.warmed(m.warmReply, nil)
		return
	}
	a.engine.Send(m.round, threadOpenResult{threadID: threadID, resumed: m.threadID != "", warm: warm,
		model: model, version: a.version})
	a.limits.begin(threadID)
	for _, n := range a.threads.router.subscribe(subscribe{threadID: threadID, round: m.round, autoApprove: m.autoApprove}) {
		a.engine.Send(m.round, roundNote{note: n})
	}
	a.touch()
}

// openFailed tells the round (or the warm-up's sender) that its thread
// could not be opened.
func (a *appServerActor) openFailed(m openThread, err error) {
	a.unbindOpen(m)
	if m.round == nil {
		a.warmed(m.warmReply, err)
		return
	}
	a.engine.Send(m.round, threadOpenResult{err: err})
}

// warm answers a WarmUp once the process runs: without a thread at once,
// with one after the registry named its codex thread and it is loaded.
func (a *appServerActor) warm(m warmUp) {
	if m.key == "" || a.registry == nil {
		a.warmed(m.reply, nil)
		return
	}
	a.threads.warming[m.key] = append(a.threads.warming[m.key], m)
	a.engine.Send(a.registry, lookupThread{key: m.key, round: a.self})
}

// looked continues the warm-ups of a mesh thread with its registry entry.
func (a *appServerActor) looked(l threadLookup) {
	ws := a.threads.warming[l.key]
	delete(a.threads.warming, l.key)
	for _, w := range ws {
		if l.threadID == "" || !a.phase.live() {
			a.warmed(w.reply, nil) // nothing to load (a new mesh thread), or the process is gone
			continue
		}
		if _, busy := a.threads.router.lookup(l.threadID); busy {
			a.warmed(w.reply, nil) // a round runs in it: loaded, and not to be reloaded under the round
			continue
		}
		o, err := a.bindOpen(openThread{threadID: l.threadID, settings: w.settings, warmReply: w.reply})
		if err != nil {
			a.openFailed(o, err)
			continue
		}
		fp := o.settings.fingerprint()
		if lt, ok := a.threads.loaded[l.threadID]; ok && lt.fingerprint == fp {
			a.opened(o, l.threadID, lt.model, fp, true)
			continue
		}
		a.resume(o, fp)
	}
}

// warmed answers a WarmUp.
func (a *appServerActor) warmed(to *actor.PID, err error) {
	ans := messages.WarmedUp{User: a.user}
	if err != nil {
		ans.Error = err.Error()
	}
	deliver(a.engine, to, ans, a.log)
}

// unloadIdle unloads the threads no round used for ThreadIdle.
func (a *appServerActor) unloadIdle() {
	if !a.phase.live() {
		return
	}
	for id, lt := range a.threads.loaded {
		if _, busy := a.threads.router.lookup(id); busy || time.Since(lt.lastUse) < a.cfg.ThreadIdle {
			continue
		}
		a.unload(id)
		a.log.Debug("unloading an idle thread", "thread", id)
		a.call(codexproto.MethodThreadUnsub, codexproto.ThreadReadParams{ThreadID: id}, "", func(_ json.RawMessage, err error) {
			if err != nil {
				a.log.Debug("unloading an idle thread", "err", err)
			}
		})
	}
}

// route hands a notification to the round subscribed to its thread.
// Notifications of no thread, or of a thread nobody runs, are kept a little
// while in case the subscription is on its way, then dropped.
//
// A child agent's thread (a codex subagent) is routed to the round of its
// root thread: the spawn (a collab item, a subagent activity, a
// thread/started with a parent) is learnt here, before the child's own
// notifications, which follow it on the same connection, are routed. The
// rounds then attribute the child's items. One map (children) serves this
// and the server requests of child agents; a round that left takes its
// children's notifications with it (they route to its thread, which
// nobody runs). Rate-limit updates go to every running round (a usage
// limit's reset time) as well as to a login session.
func (a *appServerActor) route(n *codexrpc.Notification) {
	d, err := eventmap.NoteHeadAfter(n.Params, &a.threads.lastHead) // once, for the round too
	if err == nil {
		a.threads.lastHead = d
	}
	hd := eventmap.Header{Delta: d, Err: err}
	threadID, ok := d.ThreadID, err == nil
	if !ok {
		if threadID, ok = eventmap.ThreadOf(n.Params); !ok {
			return
		}
	}
	parent, _ := a.threads.children.Note(n)
	if threadID == "" && parent != "" {
		threadID = parent // a child's thread/started: its parent's round hears of it
	}
	if threadID == "" {
		if strings.HasPrefix(n.Method, "account/") && a.pinned != nil {
			a.sendRouted()
			a.engine.Send(a.pinned, accountNote{note: n})
		}
		if n.Method == codexproto.NoteRateLimitsUpdated {
			var u codexproto.RateLimitsUpdated
			if json.Unmarshal(n.Params, &u) == nil {
				a.threads.rateLimits = &u.RateLimits
			}
			for _, round := range a.threads.router.rounds() {
				a.toRound(round, n, hd)
			}
		}
		return
	}
	root := a.threads.children.Root(threadID)
	round, ok := a.threads.router.route(root, n)
	switch n.Method {
	case codexproto.NoteTurnStarted:
		a.turnStarted(threadID, root, n)
	case codexproto.NoteTurnCompleted:
		delete(a.threads.running, threadID)
	case codexproto.NoteTokenUsage:
		model := a.threads.loaded[threadID].model
		if model == "" {
			model = a.threads.loaded[root].model
		}
		if ch, ok := usageReport(n, model); ok {
			a.engine.Send(a.registry, ch)
		}
	}
	if ok && n.Method == codexproto.NoteTurnCompleted && a.threads.children.Root(threadID) == threadID {
		if res := a.limits.met(threadID, a.cfg.Metrics); res != "" {
			a.sendRouted() // what came before, then the limit, then the end
			a.engine.Send(round, limitMet{resource: res})
		}
	}
	if ok {
		a.toRound(round, n, hd)
	}
	if n.Method == codexproto.NoteMCPStartupStatus {
		a.sendRouted()
		a.mcpStartup(threadID, n, round)
	}
}

// routed is the notifications routed to one round and not yet sent: a
// run of them (most of a batch, in a flood) goes as one message.
type routed struct {
	to    *actor.PID
	notes []*codexrpc.Notification
	heads []eventmap.Header
}

// toRound routes n to round, after what is routed to another round.
func (a *appServerActor) toRound(round *actor.PID, n *codexrpc.Notification, hd eventmap.Header) {
	if a.threads.routed.to != nil && !a.threads.routed.to.Equals(round) {
		a.sendRouted()
	}
	a.threads.routed.to = round
	a.threads.routed.notes = append(a.threads.routed.notes, n)
	a.threads.routed.heads = append(a.threads.routed.heads, hd)
}

// sendRouted sends the notifications toRound gathered.
func (a *appServerActor) sendRouted() {
	if r := a.threads.routed; len(r.notes) > 0 {
		a.engine.Send(r.to, roundNotes{notes: r.notes, heads: r.heads})
	}
	a.threads.routed = routed{}
}

// MCPStartupReported is broadcast on the engine's event stream for every
// MCP server startup status an app-server reports (a thread's servers
// start after thread/start or thread/resume, and a dead one takes a second
// or so to fail). Round is the round it was delivered to; Kept is a status
// kept for the round about to subscribe (it reported before the round's
// subscribe); with neither, the thread's round had left and the status
// is only logged. Error has the round's MCP token and every URL's query
// and userinfo removed.
type MCPStartupReported struct {
	User     string
	ThreadID string
	Server   string
	Status   string // starting | ready | failed | …
	Error    string
	Round    *actor.PID
	Kept     bool
}

// maxMCPErrorLen bounds the error text of a failed MCP start in logs.
const maxMCPErrorLen = 1024

// mcpStartup logs an MCP server's startup status (a failure at Warn, with
// the server and its error) and broadcasts it.
func (a *appServerActor) mcpStartup(threadID string, n *codexrpc.Notification, round *actor.PID) {
	var s codexproto.MCPStartupStatus
	if json.Unmarshal(n.Params, &s) != nil {
		return
	}
	ev := MCPStartupReported{User: a.user, ThreadID: threadID, Server: s.Name, Status: s.Status, Round: round,
		Kept: round == nil && a.threads.router.keeps(threadID)}
	if s.Error != nil {
		ev.Error = a.redact.Redact(scrubURLs(*s.Error))
		if len(ev.Error) > maxMCPErrorLen {
			ev.Error = ev.Error[:maxMCPErrorLen] + "…"
		}
	}
	log := a.log.With("thread", threadID, "server", s.Name, "round_gone", round == nil && !ev.Kept)
	if s.Status == "failed" {
		log.Warn("MCP server failed to start", "err", ev.Error)
	} else {
		log.Debug("MCP server startup", "status", s.Status)
	}
	a.engine.BroadcastEvent(ev)
}

// urlPattern finds URLs in free text.
var urlPattern = regexp.MustCompile(`https?://[^\s()<>"'\x60]+`)

// scrubURLs keeps only the scheme, host and path of every URL in text:
// userinfo and query may hold secrets.
func scrubURLs(text string) string {
	return urlPattern.ReplaceAllStringFunc(text, func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			return "<URL>"
		}
		return (&url.URL{Scheme: p.Scheme, Host: p.Host, Path: p.Path}).String()
	})
}

// answer decides a server request in-line, or, for a round (or a child
// agent of a round) with on_request ask, hands it to the round's log,
// which answers m.reply itself once its caller did or the deadline passed.
func (a *appServerActor) answer(m codexServerRequest) serverAnswer {
	threadID, _ := eventmap.ThreadOf(m.req.Params)
	root := a.threads.children.Root(threadID) // a child agent's request is its round's
	s, ok := a.threads.router.lookup(root)
	if ask, has := a.threads.askers[s.round.ID]; ok && has && (ask.all || m.req.Method == codexproto.ReqToolCall) {
		log := ask.log
		child := ""
		if root != threadID {
			child = threadID
		}
		a.engine.Send(log, serverAsk{req: m.req, child: child, reply: m.reply})
		return serverAnswer{wait: maxAskWait}
	}
	res, question, err := policy.Answer(m.req, ok && s.autoApprove, a.cfg.grantBounds())
	if question != "" && ok {
		a.engine.Send(s.round, questionAsked{text: question})
	}
	if ok && (m.req.Method == codexproto.ReqCommandApproval || m.req.Method == codexproto.ReqFileChangeApproval) {
		a.engine.Send(s.round, approvalAnswered{req: m.req, approved: s.autoApprove})
	}
	return serverAnswer{result: res, err: err}
}
