package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/procs"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// maxEarlyNotes bounds the notifications kept for threads no round has
// subscribed to yet (those that race the subscription, like an MCP server's
// startup status right after thread/start).
const maxEarlyNotes = 256

// ProcRecordName is the file, in the daemon's folder of the user
// ({Homes}/<user>/meshweaver/, see ProcRecordPath), that records the pid and
// start time of the user's live app-server, so that a daemon that was
// killed outright can end it on its next start.
const ProcRecordName = "appserver.pid"

// ProcRecordPath is where the pid record of the app-server of home (a
// CODEX_HOME) is kept: beside the home, in the daemon's folder of the user,
// where the app-server (which may write all of its home) cannot reach.
func ProcRecordPath(home string) string {
	return filepath.Join(filepath.Dir(home), "meshweaver", ProcRecordName)
}

// ErrUnavailable reports a user whose app-server crashed too often: no
// start is tried until the cool-down ends.
var ErrUnavailable = errors.New("codex app-server unavailable")

// unavailable is why a round or a login cannot have the app-server: err,
// named ErrUnavailable once (a cool-down's error already is).
func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Messages the app-server actor sends itself.
type (
	startNow struct{ gen uint64 }
	tick     struct{}
	evictNow struct{}
	// callDone is the answer to call seq, sent by the Conn's read goroutine
	// in wire order with the process's notifications (codexNote).
	callDone struct {
		seq    uint64
		result json.RawMessage
		err    error
	}
	callExpired struct{ seq uint64 } // call seq's deadline passed
	callRetry   struct{ seq uint64 } // call seq was refused as overloaded; send it again
)

// call is a call to the CLI in flight: the app-server actor's own, or one
// it makes for another actor (then answers it with appAnswer).
type call struct {
	seq     uint64
	gen     uint64
	id      int64 // the Conn's id, for Forget
	method  string
	params  any
	thread  string // the thread the call is about, if any
	attempt int
	backoff time.Duration
	timer   *time.Timer
	probe   bool // a health call: its deadline passing means hung
	then    func(result json.RawMessage, err error)
}

// loadedThread is a thread the current process holds, with the settings
// it was loaded with.
type loadedThread struct {
	fingerprint string
	lastUse     time.Time
}

// appServerActor owns one user's `codex app-server` process and its
// connection, and is the only caller of that process: rounds open threads
// and start, steer and interrupt turns, and the login actor makes its
// calls, by message (openThread, appCall). Each call is sent without
// blocking Receive (the Conn's write goroutine writes it), runs under a
// deadline of the actor's, and its answer comes back into this actor's
// mailbox in wire order with the notifications, to be handed on in that
// order. It starts the process on first need, routes notifications by
// thread id to the subscribed round, answers server requests in-line,
// keeps the threads it loaded warm for ThreadIdle, and replaces a process
// that dies or hangs, after a backoff, and past the restart limit not
// before a cool-down. An idle process is stopped.
type appServerActor struct {
	cfg  *Config
	user string
	home string
	log  *slog.Logger

	engine *actor.Engine
	self   *actor.PID
	ticker actor.SendRepeater

	gen      uint64
	proc     *codexproc.Process
	starting bool
	queue    []any // openThread and appCall waiting for a ready process
	threads  threadRouter
	loaded   map[string]loadedThread // threads the current process holds
	calls    map[uint64]*call
	seq      uint64
	keying   uint64 // a key check in flight (its number): the queue waits for keyChecked
	keySeq   uint64
	login    *actor.PID // the login actor, which sets the home's credentials up
	pinned   *actor.PID // the login actor during a session
	registry *actor.PID // the user's registry, for a warm-up's thread
	warming  map[string][]warmUp
	creds    *store.Credentials
	redact   *codexproc.Redactor

	lastUse      time.Time
	cap          *actor.PID // the node's cap actor
	parent       *actor.PID // the user actor
	reported     time.Time  // the last use the cap actor heard of
	reportedBusy bool
	restartNext  bool // the next start follows a death
	restarts     restartPolicy
	delay        *time.Timer // a backed-off start
	lastHeard    time.Time   // the process last said something
	probing      bool        // a health call is in flight

	// Goroutines: start attempts, exit watchers and stops. Processes a
	// start produced are in live until stopped, so Stopped can end even
	// those whose start message never arrived.
	wg   sync.WaitGroup
	mu   sync.Mutex
	live map[*codexproc.Process]struct{}
	down bool
}

func newAppServerActor(cfg *Config, user, home string, creds *store.Credentials, registry, cap *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &appServerActor{
			cfg: cfg, user: user, home: home, creds: creds, redact: &codexproc.Redactor{}, registry: registry, cap: cap,
			warming:  make(map[string][]warmUp),
			restarts: newRestartPolicy(cfg),
			log:      cfg.Logger.With("user", userTag(user), "actor", "appserver"),
			threads:  newThreadRouter(maxEarlyNotes),
			loaded:   make(map[string]loadedThread),
			calls:    make(map[uint64]*call),
			live:     make(map[*codexproc.Process]struct{}),
		}
	}
}

func (a *appServerActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.engine, a.self, a.parent = c.Engine(), c.PID(), c.Parent()
		a.ticker = c.SendRepeat(c.PID(), tick{}, tickInterval(min(a.cfg.IdleTimeout, a.cfg.CallTimeout, a.cfg.ThreadIdle)))
	case actor.Stopped:
		a.ticker.Stop()
		a.shutdown()
	case openThread:
		a.redact.Add(m.secrets...)
		a.command(m)
	case appCall:
		if m.pin {
			a.pinned = m.to
		}
		a.redact.Add(m.secrets...)
		a.command(m)
	case warmUp:
		a.redact.Add(m.secrets...)
		a.command(m)
	case threadLookup:
		a.looked(m)
	case startNow:
		if m.gen == a.gen && a.starting {
			a.launch()
		}
	case codexStarted:
		a.started(m)
	case codexStartFailed:
		if m.gen != a.gen {
			return
		}
		a.starting = false
		a.crashed()
		a.log.Warn("codex app-server failed to start", "err", m.err)
		a.failQueue(m.err)
	case codexExited:
		a.exited(m)
	case codexNote:
		if m.gen == a.gen {
			a.lastHeard = time.Now()
			a.touch()
			a.route(m.note)
		}
	case callDone:
		if k := a.calls[m.seq]; k != nil {
			if k.gen == a.gen {
				a.lastHeard = time.Now()
			}
			a.answered(k, m.result, m.err)
		}
	case callExpired:
		a.expired(m.seq)
	case callRetry:
		if k := a.calls[m.seq]; k != nil {
			a.send(k)
		}
	case codexServerRequest:
		if m.gen != a.gen {
			// A process on its way out: its requests get the safe answer.
			res, err := declineAnswer(m.req.Method)
			m.reply <- serverAnswer{result: res, err: err}
			return
		}
		m.reply <- a.answer(m)
	case unsubscribe:
		a.threads.unsubscribe(m.threadID, m.round)
		if lt, ok := a.loaded[m.threadID]; ok && m.keep {
			lt.lastUse = time.Now()
			a.loaded[m.threadID] = lt
		} else {
			// A round that ended without its turn's end (a stall, a failed
			// start, the daemon stopping) may leave the turn running: the
			// next round reloads the thread rather than join it.
			delete(a.loaded, m.threadID)
		}
		a.touch()
		a.holdCap()
	case unpinClient:
		if a.pinned != nil && a.pinned.Equals(m.pin) {
			a.pinned = nil
		}
		a.touch()
		a.holdCap()
	case pinClient:
		a.pinned = m.pin
	case loginIs:
		a.login = m.pid
	case keyChecked:
		if m.seq == a.keying {
			a.keying = 0
			if a.proc != nil {
				a.flushQueue()
			}
		}
	case tick:
		a.unloadIdle()
		if (a.threads.active() > 0 || len(a.calls) > 0) && time.Since(a.lastHeard) >= a.healthTimeout() {
			// Rounds wait on (or are opening threads in) a process that
			// has said nothing for a health call's length: make sure it
			// still answers, before their calls run out of time.
			a.probe()
		}
		switch {
		case !a.idle():
		case time.Since(a.lastUse) >= a.cfg.IdleTimeout:
			a.cfg.Metrics.Evictions.WithLabelValues("idle").Inc()
			a.evict("idle for " + a.cfg.IdleTimeout.String())
		default:
			a.holdCap()
		}
	case evictNow:
		if a.idle() {
			a.cfg.Metrics.Evictions.WithLabelValues("cap").Inc()
			a.evict("the node is at its cap of live app-servers")
		}
	}
}

// command runs a round's or the login actor's command now, when the
// process is ready, or once it is: a first command starts it.
func (a *appServerActor) command(m any) {
	a.touch()
	if c, ok := m.(appCall); ok && (c.setup || c.ifLive) {
		// The login actor's own setup call: it runs on the live process,
		// ahead of what waits for it, or not at all.
		if a.proc != nil {
			a.run(m)
		} else if !c.ifLive {
			a.refuse(m, errors.New("no codex app-server is running"))
		}
		return
	}
	if a.proc != nil {
		if _, err := os.Stat(a.home); err != nil {
			// The home was removed under the running CLI (a recreated
			// volume): start afresh, which recreates it and has the stored
			// key written again.
			a.log.Warn("the codex home disappeared; restarting the app-server", "err", err)
			a.evict("its home was removed")
		} else if a.keying == 0 {
			a.checkKey()
		}
	}
	if a.proc != nil && a.keying == 0 {
		a.run(m)
		return
	}
	if a.proc == nil && !a.starting {
		if until, ok := a.restarts.cooling(time.Now()); ok {
			a.refuse(m, fmt.Errorf("%w: it died %d times within %v; cooling down until %s",
				ErrUnavailable, a.cfg.RestartLimit, a.cfg.RestartWindow, until.Format(time.TimeOnly)))
			return
		}
	}
	if o, ok := m.(openThread); ok && a.proc == nil {
		a.engine.Send(o.round, appServerStarting{})
	}
	a.queue = append(a.queue, m)
	if a.proc == nil && !a.starting {
		a.start()
	}
}

// run carries out a command on the ready process.
func (a *appServerActor) run(m any) {
	switch m := m.(type) {
	case openThread:
		a.open(m)
	case appCall:
		to, tag := m.to, m.tag
		a.call(m.method, m.params, m.thread, func(res json.RawMessage, err error) {
			if to != nil {
				a.engine.Send(to, appAnswer{tag: tag, result: res, err: err})
			}
		})
	case warmUp:
		a.warm(m)
	}
}

// refuse answers a command that cannot run: no process could be had.
func (a *appServerActor) refuse(m any, err error) {
	switch m := m.(type) {
	case openThread:
		a.engine.Send(m.round, threadOpenResult{err: err, unavailable: true})
	case appCall:
		if m.to != nil {
			a.engine.Send(m.to, appAnswer{tag: m.tag, err: err, unavailable: true})
		}
	case warmUp:
		a.warmed(m.reply, err)
	}
}

// flushQueue runs the commands that waited for the process.
func (a *appServerActor) flushQueue() {
	q := a.queue
	a.queue = nil
	for _, m := range q {
		a.run(m)
	}
}

func (a *appServerActor) failQueue(err error) {
	q := a.queue
	a.queue = nil
	for _, m := range q {
		a.refuse(m, err)
	}
}

// open resumes or starts a thread for a round. A thread this process holds
// with the same settings is the round's at once: no unload, no resume. A
// thread held with other settings is unloaded first (a loaded thread
// ignores a resume's settings) and resumed with the round's; a refused
// resume is the round's to handle (it starts afresh with a transcript).
func (a *appServerActor) open(m openThread) {
	fp := m.settings.fingerprint()
	if m.threadID == "" {
		a.call(codexproto.MethodThreadStart, codexproto.ThreadStartParams{
			Cwd: m.settings.Cwd, Sandbox: m.settings.Sandbox, ApprovalPolicy: m.settings.ApprovalPolicy,
			DeveloperInstructions: m.settings.DeveloperInstructions, Config: m.settings.Config,
		}, "", func(res json.RawMessage, err error) {
			var t codexproto.ThreadResult
			if err == nil {
				err = decodeResult(codexproto.MethodThreadStart, res, &t)
			}
			if err != nil {
				a.openFailed(m, err)
				return
			}
			a.opened(m, t.Thread.ID, fp, false)
		})
		return
	}
	if lt, ok := a.loaded[m.threadID]; ok && lt.fingerprint == fp && m.round != nil {
		a.cfg.Metrics.WarmThreads.Inc()
		a.opened(m, m.threadID, fp, true)
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
		if gen != a.gen || a.proc == nil {
			if err == nil {
				err = errors.New("the codex app-server restarted while the thread was opening")
			}
			a.openFailed(m, err)
			return
		}
		delete(a.loaded, id)
		// What the thread says from here on (its MCP servers' startup) is
		// this round's: the unsubscribe's answer came after anything the
		// thread said before.
		a.threads.reopen(id)
		a.call(codexproto.MethodThreadResume, codexproto.ThreadResumeParams{
			ThreadID: id, Cwd: m.settings.Cwd, Sandbox: m.settings.Sandbox,
			ApprovalPolicy: m.settings.ApprovalPolicy, DeveloperInstructions: m.settings.DeveloperInstructions,
			Config: m.settings.Config, ExcludeTurns: true,
		}, id, func(_ json.RawMessage, err error) {
			if err != nil {
				a.openFailed(m, err)
				return
			}
			a.cfg.Metrics.ThreadResumes.Inc()
			a.opened(m, id, fp, false)
		})
	})
}

// opened records a loaded thread and subscribes the round to it: the
// round hears of its thread first, then what the thread said before.
func (a *appServerActor) opened(m openThread, threadID, fp string, warm bool) {
	a.loaded[threadID] = loadedThread{fingerprint: fp, lastUse: time.Now()}
	if m.round == nil { // a warm-up
		a.warmed(m.warmReply, nil)
		return
	}
	a.engine.Send(m.round, threadOpenResult{threadID: threadID, resumed: m.threadID != "", warm: warm})
	for _, n := range a.threads.subscribe(subscribe{threadID: threadID, round: m.round, autoApprove: m.autoApprove}) {
		a.engine.Send(m.round, roundNote{note: n})
	}
	a.touch()
}

// openFailed tells the round (or the warm-up's sender) that its thread
// could not be opened.
func (a *appServerActor) openFailed(m openThread, err error) {
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
	a.warming[m.key] = append(a.warming[m.key], m)
	a.engine.Send(a.registry, lookupThread{key: m.key, round: a.self})
}

// looked continues the warm-ups of a mesh thread with its registry entry.
func (a *appServerActor) looked(l threadLookup) {
	ws := a.warming[l.key]
	delete(a.warming, l.key)
	for _, w := range ws {
		if l.threadID == "" || a.proc == nil {
			a.warmed(w.reply, nil) // nothing to load (a new mesh thread), or the process is gone
			continue
		}
		o := openThread{threadID: l.threadID, settings: w.settings, warmReply: w.reply}
		fp := o.settings.fingerprint()
		if lt, ok := a.loaded[l.threadID]; ok && lt.fingerprint == fp {
			a.warmed(w.reply, nil)
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
	if a.proc == nil {
		return
	}
	for id, lt := range a.loaded {
		if _, busy := a.threads.lookup(id); busy || time.Since(lt.lastUse) < a.cfg.ThreadIdle {
			continue
		}
		delete(a.loaded, id)
		a.log.Debug("unloading an idle thread", "thread", id)
		a.call(codexproto.MethodThreadUnsub, codexproto.ThreadReadParams{ThreadID: id}, "", func(_ json.RawMessage, err error) {
			if err != nil {
				a.log.Debug("unloading an idle thread", "err", err)
			}
		})
	}
}

// call sends a call to the current process; then runs in Receive with its
// answer, its error, or its deadline's passing (context.DeadlineExceeded).
func (a *appServerActor) call(method string, params any, thread string, then func(json.RawMessage, error)) {
	a.seq++
	k := &call{seq: a.seq, gen: a.gen, method: method, params: params, thread: thread, attempt: 0,
		backoff: codexrpc.DefaultRetry.Base, then: then}
	a.calls[k.seq] = k
	if lt, ok := a.loaded[thread]; ok {
		lt.lastUse = time.Now()
		a.loaded[thread] = lt
	}
	d := a.cfg.CallTimeout
	if method == codexproto.MethodThreadLoadedList {
		k.probe, d = true, a.healthTimeout()
	}
	engine, self, seq := a.engine, a.self, k.seq
	k.timer = time.AfterFunc(d, func() { engine.Send(self, callExpired{seq: seq}) })
	a.send(k)
}

// send writes k to the process (again, after an overloaded answer).
func (a *appServerActor) send(k *call) {
	k.attempt++
	if a.proc == nil || k.gen != a.gen {
		a.answered(k, nil, fmt.Errorf("%s: %w", k.method, codexrpc.ErrClosed))
		return
	}
	engine, self, seq := a.engine, a.self, k.seq
	id, err := a.proc.Conn().Go(k.method, k.params, func(res json.RawMessage, err error) {
		engine.Send(self, callDone{seq: seq, result: res, err: err})
	})
	if err != nil {
		a.answered(k, nil, err)
		return
	}
	k.id = id
}

// answered settles call k, unless the server refused it as overloaded and
// it may be tried again (with full-jitter exponential backoff, as Conn.Call).
func (a *appServerActor) answered(k *call, res json.RawMessage, err error) {
	var we *codexrpc.WireError
	if errors.As(err, &we) && we.Code == codexrpc.CodeOverloaded && k.attempt < codexrpc.DefaultRetry.Attempts {
		d := k.backoff/2 + rand.N(k.backoff/2+1)
		k.backoff = min(k.backoff*2, codexrpc.DefaultRetry.Max)
		engine, self, seq := a.engine, a.self, k.seq
		time.AfterFunc(d, func() { engine.Send(self, callRetry{seq: seq}) })
		return
	}
	delete(a.calls, k.seq)
	k.timer.Stop()
	if k.probe {
		a.probing = false
		if err == nil || errors.As(err, &we) {
			a.lastHeard = time.Now() // any answer shows the process reads and writes
		}
		return
	}
	k.then(res, err)
	a.touch()
	a.holdCap()
}

// expired ends a call whose deadline passed. A health call's means the
// process is hung; any other's asks for a health call.
func (a *appServerActor) expired(seq uint64) {
	k := a.calls[seq]
	if k == nil {
		return
	}
	delete(a.calls, seq)
	if a.proc != nil && k.gen == a.gen {
		a.proc.Conn().Forget(k.id)
	}
	if k.probe {
		a.probing = false
		a.hung(k.gen)
		return
	}
	k.then(nil, fmt.Errorf("%s: %w", k.method, context.DeadlineExceeded))
	if k.gen == a.gen {
		a.probe()
	}
}

// tickInterval checks idleness often enough for the timeout to hold within
// a quarter of itself.
func tickInterval(idle time.Duration) time.Duration {
	return min(max(idle/4, 10*time.Millisecond), 30*time.Second)
}

// idle reports a live process that serves no round and no login, and
// has no call in flight or waiting.
func (a *appServerActor) idle() bool {
	return a.proc != nil && a.threads.active() == 0 && a.pinned == nil && len(a.calls) == 0 && len(a.queue) == 0
}

// holdCap reports this app-server's use to the cap actor, which asks the
// least recently used idle ones to stop when the node is over MaxLive: a
// start sheds what it can, and a pin or a round that ends later leaves the
// node over the cap until an app-server reports itself idle (on unpin,
// unsubscribe, a call's end and every tick).
func (a *appServerActor) holdCap() {
	if a.proc != nil {
		a.report(false)
	}
}

// touch records a use, for idle eviction and the node's LRU choice. The
// cap actor hears of it when the process turns busy or idle, and at most
// once a second otherwise.
func (a *appServerActor) touch() {
	a.lastUse = time.Now()
	if a.proc != nil && (a.idle() == a.reportedBusy || a.lastUse.Sub(a.reported) >= time.Second) {
		a.report(false)
	}
}

// report tells the cap actor about the live process.
func (a *appServerActor) report(started bool) {
	busy := !a.idle()
	a.reported, a.reportedBusy = a.lastUse, busy
	a.engine.Send(a.cap, liveUse{pid: a.self, lastUse: a.lastUse, busy: busy, started: started})
}

// gone tells the cap actor (and the user actor) that the process is gone.
func (a *appServerActor) gone() {
	a.engine.Send(a.cap, liveGone{pid: a.self})
	a.engine.Send(a.parent, appServerLive{live: false})
}

// crashed counts an unexpected death; past the limit the user cools down.
func (a *appServerActor) crashed() {
	a.restartNext = true
	if a.restarts.crashed(time.Now()) {
		until, _ := a.restarts.cooling(time.Now())
		a.log.Error("codex app-server keeps dying; the user is unavailable for a cool-down",
			"limit", a.cfg.RestartLimit, "window", a.cfg.RestartWindow, "until", until)
	}
}

// backoff is the jittered exponential wait before a restart (see
// restartPolicy.backoff).
func (a *appServerActor) backoff() time.Duration {
	return a.restarts.backoff(time.Now(), func(k time.Duration) time.Duration { return rand.N(k + 1) })
}

// start begins a start attempt, after the backoff if crashes are recent.
func (a *appServerActor) start() {
	a.gen++
	a.starting = true
	if d := a.backoff(); d > 0 {
		a.log.Info("restarting codex app-server after a backoff", "delay", d)
		engine, self, gen := a.engine, a.self, a.gen
		a.delay = time.AfterFunc(d, func() { engine.Send(self, startNow{gen: gen}) })
		return
	}
	a.launch()
}

// launch starts a process on a goroutine: exec and initialize take tens of
// milliseconds, and Receive never blocks.
func (a *appServerActor) launch() {
	gen := a.gen
	engine, self := a.engine, a.self
	cfg := codexproc.Config{
		Binary:    a.cfg.CodexBin,
		Args:      a.cfg.CodexArgs,
		Home:      a.home,
		Dir:       a.cfg.Workspace,
		Overrides: a.cfg.Overrides,
		Env:       codexproc.AllowedEnv(environ(), a.cfg.CodexEnv),
		Logger:    a.log,
		Redactor:  a.redact,
		StopGrace: a.cfg.StopGrace,
		Conn: codexrpc.Options{
			Logger: a.log,
			OnNotification: func(n *codexrpc.Notification) {
				engine.Send(self, codexNote{gen: gen, note: n})
			},
			OnRequest: func(ctx context.Context, r *codexrpc.Request) (any, error) {
				reply := make(chan serverAnswer, 1)
				engine.Send(self, codexServerRequest{gen: gen, req: r, reply: reply})
				t := time.NewTimer(10 * time.Second)
				defer t.Stop()
				select {
				case ans := <-reply:
					return ans.result, ans.err
				case <-ctx.Done():
				case <-t.C:
				}
				// Never leave the CLI waiting: decline what could not be decided.
				return declineAnswer(r.Method)
			},
		},
	}
	record := ProcRecordPath(a.home)
	// The stored API key is redacted from everything the process says,
	// before it can say anything.
	if key, ok, err := a.creds.APIKey(); err == nil && ok {
		a.redact.Add(key)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		// A process a killed daemon left behind for this home goes first.
		if reaped, err := procs.ReapRecord(record, a.cfg.StopGrace); err != nil {
			a.log.Warn("reaping a leftover app-server", "err", err)
		} else if reaped {
			a.log.Warn("ended an app-server a previous daemon left running")
		}
		if iso := a.cfg.Isolation; iso != nil {
			// Its uid, its home's owner and modes, its sandbox: before the
			// start, on this goroutine (a first allocation chowns a home).
			bin, err := codexproc.ResolveBinary(cfg.Binary)
			if err == nil {
				cfg.Binary = bin
			}
			l, err := iso.Prepare(a.home, cfg.Binary)
			if err != nil {
				engine.Send(self, codexStartFailed{gen: gen, err: fmt.Errorf("starting codex: %w", err)})
				return
			}
			cfg.Wrapper, cfg.Credential = l.Wrapper, l.Credential
			cfg.Env = setEnv(cfg.Env, l.Env)
			if l.Wrapper != nil {
				cfg.Dir = "/" // bubblewrap changes into the workspace itself
			}
		}
		p, err := codexproc.Start(cfg)
		if err != nil {
			engine.Send(self, codexStartFailed{gen: gen, err: err})
			return
		}
		a.mu.Lock()
		if a.down {
			a.mu.Unlock()
			a.stopProc(p)
			return
		}
		a.live[p] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		go a.watch(gen, p, record)
		if st, err := procs.StartTime(p.PID()); err == nil {
			exe := cfg.Binary
			if len(cfg.Wrapper) > 0 {
				exe = cfg.Wrapper[0] // the pid is bubblewrap's
			}
			if err := store.WriteProcRecord(record, store.ProcRecord{PID: p.PID(), StartTime: st, Exe: exe}); err != nil {
				a.log.Warn("recording the app-server's pid", "err", err)
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
		defer cancel()
		client := codexproto.NewClient(p.Conn())
		if _, err := client.Initialize(ctx, codexproto.ClientInfo{Name: a.cfg.ClientName, Version: Version}); err != nil {
			a.stopProc(p)
			engine.Send(self, codexStartFailed{gen: gen, err: fmt.Errorf("initializing codex: %w", err)})
			return
		}
		engine.Send(self, codexStarted{gen: gen, proc: p, version: client.Version})
	}()
}

// watch reports the process's end once its output is drained, so the error
// carries the exit status and the stderr tail, and drops its pid record.
func (a *appServerActor) watch(gen uint64, p *codexproc.Process, record string) {
	defer a.wg.Done()
	<-p.Exited()
	<-p.Conn().Done()
	a.mu.Lock()
	delete(a.live, p)
	a.mu.Unlock()
	if rec, err := store.ReadProcRecord(record); err == nil && rec.PID == p.PID() {
		_ = os.Remove(record)
	}
	a.engine.Send(a.self, codexExited{gen: gen, err: p.Conn().Err()})
}

func (a *appServerActor) started(m codexStarted) {
	if m.gen != a.gen {
		a.goStop(m.proc)
		return
	}
	a.starting = false
	select {
	case <-m.proc.Exited():
		// It died between initialize and this message; its exit report
		// came first and was set aside (no process yet), so report it here.
		a.crashed()
		a.log.Warn("codex app-server died while starting", "exit", m.proc.ExitStatus().String())
		a.failQueue(fmt.Errorf("codex app-server %s while starting", m.proc.ExitStatus()))
		a.goStop(m.proc)
		return
	default:
	}
	a.proc = m.proc
	a.lastHeard = time.Now()
	a.cfg.Metrics.Starts.Inc()
	if a.restartNext {
		a.cfg.Metrics.Restarts.Inc()
		a.restartNext = false
	}
	a.log.Info("codex app-server ready", "pid", m.proc.PID(), "version", m.version.String())
	a.lastUse = time.Now()
	a.engine.Send(a.parent, appServerLive{live: true})
	a.checkKey()
	if a.keying == 0 {
		a.flushQueue()
	}
	a.report(true)
}

func (a *appServerActor) exited(m codexExited) {
	// Before the start reported, its goroutine reports the failure itself.
	if m.gen != a.gen || a.proc == nil {
		return
	}
	err := m.err
	if err == nil {
		err = errors.New("codex app-server ended")
	}
	if !errors.Is(err, codexrpc.ErrClosed) {
		a.log.Warn("codex app-server died", "err", err)
		a.cfg.Metrics.Deaths.Inc()
		a.crashed()
	}
	a.lose(err)
	a.failQueue(err)
}

// evict stops an idle process. Its generation ends here, so its exit is
// not a crash; the next command starts a fresh one and rounds resume.
func (a *appServerActor) evict(why string) {
	a.log.Info("stopping an idle codex app-server", "pid", a.proc.PID(), "why", why)
	p := a.proc
	a.drop(errors.New("codex app-server stopped: " + why))
	a.goStop(p)
}

// drop ends the current process's generation: every round and the login
// that use it hear lost, and nothing it still says reaches anyone. The
// caller stops the process.
func (a *appServerActor) drop(lost error) {
	a.gen++
	a.lose(lost)
}

// lose tells everyone who used the process that it is gone: subscribed
// rounds and the pinned login hear lost, calls in flight end with it, and
// the threads it held are forgotten.
func (a *appServerActor) lose(lost error) {
	for _, round := range a.threads.reset() {
		a.engine.Send(round, codexLost{err: lost})
	}
	if a.pinned != nil {
		a.engine.Send(a.pinned, codexLost{err: lost})
		a.pinned = nil
	}
	for _, k := range a.calls {
		delete(a.calls, k.seq)
		k.timer.Stop()
		if !k.probe {
			k.then(nil, fmt.Errorf("%s: %w", k.method, lost))
		}
	}
	a.probing = false
	a.keying = 0
	clear(a.loaded)
	a.proc = nil
	a.gone()
}

// healthTimeout bounds a health call: a live app-server answers one in
// milliseconds.
func (a *appServerActor) healthTimeout() time.Duration {
	return min(a.cfg.CallTimeout, 10*time.Second)
}

// probe makes a health call to the current process, unless one is in
// flight: a call that runs out of its deadline (healthTimeout) means the
// process is hung.
func (a *appServerActor) probe() {
	if a.proc == nil || a.probing {
		return
	}
	a.probing = true
	a.call(codexproto.MethodThreadLoadedList, struct{}{}, "", nil)
}

// hung acts on a health call that was not answered in time: the process
// of generation gen (stopped, or deadlocked) is killed, counted as a death
// of its own cause, and the next command starts a fresh one under the
// restart policy.
func (a *appServerActor) hung(gen uint64) {
	if gen != a.gen || a.proc == nil {
		return
	}
	p := a.proc
	a.log.Error("codex app-server stopped answering; killing it", "pid", p.PID())
	a.cfg.Metrics.Deaths.Inc()
	a.cfg.Metrics.Hung.Inc()
	a.crashed()
	a.drop(fmt.Errorf("codex app-server stopped answering (no answer to a health call within %v); it was killed", a.healthTimeout()))
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 4*a.cfg.StopGrace)
		defer cancel()
		if err := p.Kill(ctx); err != nil {
			a.log.Warn("killing a hung codex app-server", "pid", p.PID(), "err", err)
		}
	}()
}

// goStop stops a process on a goroutine the actor owns.
func (a *appServerActor) goStop(p *codexproc.Process) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.stopProc(p)
	}()
}

// route hands a notification to the round subscribed to its thread.
// Notifications of no thread, or of a thread nobody runs, are kept a little
// while in case the subscription is on its way, then dropped.
func (a *appServerActor) route(n *codexrpc.Notification) {
	threadID, ok := threadOf(n.Params)
	if !ok {
		return
	}
	if threadID == "" {
		if strings.HasPrefix(n.Method, "account/") && a.pinned != nil {
			a.engine.Send(a.pinned, accountNote{note: n})
		}
		return
	}
	round, ok := a.threads.route(threadID, n)
	if ok {
		a.engine.Send(round, roundNote{note: n})
	}
	if n.Method == codexproto.NoteMCPStartupStatus {
		a.mcpStartup(threadID, n, round)
	}
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
		Kept: round == nil && a.threads.keeps(threadID)}
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

// answer decides a server request in-line: nothing ever waits on a human.
func (a *appServerActor) answer(m codexServerRequest) serverAnswer {
	threadID, _ := threadOf(m.req.Params)
	s, ok := a.threads.lookup(threadID)
	res, question, err := answerServerRequest(m.req, ok && s.autoApprove)
	if question != "" && ok {
		a.engine.Send(s.round, questionAsked{text: question})
	}
	if ok && (m.req.Method == codexproto.ReqCommandApproval || m.req.Method == codexproto.ReqFileChangeApproval) {
		a.engine.Send(s.round, approvalAnswered{req: m.req, approved: s.autoApprove})
	}
	return serverAnswer{result: res, err: err}
}

func (a *appServerActor) stopProc(p *codexproc.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*a.cfg.StopGrace)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		a.log.Warn("stopping codex app-server", "pid", p.PID(), "err", err)
	}
}

// checkKey has the login actor make sure the home holds the stored
// credentials before the queued commands run (it writes the stored API key
// into a home that lacks it, through a setup call): on every start and
// before every command, as a home may lose its auth.json at any time. The
// queue waits for keyChecked, or CallTimeout.
func (a *appServerActor) checkKey() {
	if a.login == nil {
		return
	}
	a.keySeq++
	a.keying = a.keySeq
	a.engine.Send(a.login, keyCheck{seq: a.keySeq})
	engine, self, seq := a.engine, a.self, a.keySeq
	time.AfterFunc(a.cfg.CallTimeout+time.Second, func() { engine.Send(self, keyChecked{seq: seq}) })
}

// shutdown is the destructor: it stops every process this actor started
// and joins every goroutine it owns.
func (a *appServerActor) shutdown() {
	if a.delay != nil {
		a.delay.Stop()
	}
	a.mu.Lock()
	a.down = true
	var all []*codexproc.Process
	for p := range a.live {
		all = append(all, p)
	}
	a.mu.Unlock()
	for _, p := range all {
		a.stopProc(p)
	}
	// A start still in flight sees down and stops what it made.
	a.wg.Wait()
	a.engine.Send(a.cap, liveGone{pid: a.self})
	for _, k := range a.calls {
		k.timer.Stop()
	}
	a.failQueue(codexrpc.ErrClosed)
	a.proc = nil
}
