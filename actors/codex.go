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

	"github.com/meshweaver/supervisor/codexrpc"
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

// Messages the codex actor sends itself.
type (
	startNow struct{ gen uint64 }
	tick     struct{}
	evictNow struct{}
)

// codexActor owns one user's `codex app-server` process and its connection.
// It starts the process on first need, hands the ready client to rounds,
// routes notifications by thread id to the subscribed round, and answers
// server requests in-line. A death fails every subscribed round; the next
// acquire starts a fresh process, after a backoff, and past the restart
// limit not before a cool-down. An idle process is stopped.
type codexActor struct {
	cfg  *Config
	user string
	home string
	log  *slog.Logger

	engine *actor.Engine
	self   *actor.PID
	ticker actor.SendRepeater

	gen      uint64
	proc     *codexrpc.Process
	client   *codexrpc.Client
	starting bool
	waiters  []acquireClient // requesters waiting for the start
	threads  threadRouter
	children childThreads          // child agents' threads → their parents
	askers   map[string]*actor.PID // round actor id → its log, for rounds that ask (askVia)
	pinned   *actor.PID            // the login actor during a session
	creds    *store.Credentials
	redact   *codexrpc.Redactor

	leases      []time.Time // when clients were handed out and not yet subscribed or released
	lastUse     time.Time
	restartNext bool // the next start follows a death
	restarts    restartPolicy
	delay       *time.Timer // a backed-off start
	lastHeard   time.Time   // the process last said something (a notification, an answer to a health call)
	probeGen    uint64      // the generation a health call is in flight for

	// Goroutines: start attempts, exit watchers and stops. Processes a
	// start produced are in live until stopped, so Stopped can end even
	// those whose start message never arrived.
	wg   sync.WaitGroup
	mu   sync.Mutex
	live map[*codexrpc.Process]struct{}
	down bool
}

func newCodexActor(cfg *Config, user, home string, creds *store.Credentials) actor.Producer {
	return func() actor.Receiver {
		return &codexActor{
			cfg: cfg, user: user, home: home, creds: creds, redact: &codexrpc.Redactor{},
			restarts: newRestartPolicy(cfg),
			log:      cfg.Logger.With("user", userTag(user), "actor", "codex"),
			threads:  newThreadRouter(maxEarlyNotes),
			live:     make(map[*codexrpc.Process]struct{}),
		}
	}
}

func (a *codexActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		a.engine, a.self = c.Engine(), c.PID()
		a.ticker = c.SendRepeat(c.PID(), tick{}, tickInterval(min(a.cfg.IdleTimeout, a.cfg.CallTimeout)))
	case actor.Stopped:
		a.ticker.Stop()
		a.shutdown()
	case acquireClient:
		a.acquire(m)
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
		a.answerWaiters(clientReady{err: m.err})
	case codexExited:
		a.exited(m)
	case askVia:
		if a.askers == nil {
			a.askers = make(map[string]*actor.PID)
		}
		a.askers[m.round.ID] = m.log
	case askViaGone:
		delete(a.askers, m.round.ID)
	case codexNote:
		if m.gen == a.gen {
			a.children.note(m.note)
			a.lastHeard = time.Now()
			a.touch()
			a.route(m.note)
		}
	case checkHealth:
		a.probe(m.gen)
	case healthChecked:
		a.checked(m)
	case codexServerRequest:
		if m.gen != a.gen {
			// A process on its way out: its requests get the safe answer.
			res, err := declineAnswer(m.req.Method)
			m.reply <- serverAnswer{result: res, err: err}
			return
		}
		m.reply <- a.answer(m)
	case releaseClient:
		if m.gen == a.gen && len(a.leases) > 0 {
			a.leases = a.leases[1:]
		}
		a.touch()
		a.holdCap()
	case subscribe:
		if m.gen == a.gen && len(a.leases) > 0 {
			a.leases = a.leases[1:]
		}
		if m.gen != a.gen || a.proc == nil {
			// That process is gone (the round has heard, or will hear, of
			// it); a stale entry would keep the next one from ever idling.
			c.Send(m.round, codexLost{err: errors.New("the codex app-server restarted while the round was starting")})
			return
		}
		for _, n := range a.threads.subscribe(m) {
			c.Send(m.round, roundNote{note: n})
		}
		a.touch()
	case reopenThread:
		a.threads.reopen(m.threadID)
	case unsubscribe:
		a.threads.unsubscribe(m.threadID, m.round)
		a.touch()
		a.holdCap()
	case unpinClient:
		if a.pinned != nil && a.pinned.Equals(m.pin) {
			a.pinned = nil
		}
		a.touch()
		a.holdCap()
	case applyAPIKey:
		if a.client != nil {
			client := a.client
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.writeAPIKey(client, true)
			}()
		}
	case tick:
		if (a.threads.active() > 0 || a.leased()) && time.Since(a.lastHeard) >= a.healthTimeout() {
			// Rounds wait on (or are opening threads in) a process that
			// has said nothing for a health call's length: make sure it
			// still answers, before their calls run out of time.
			a.probe(a.gen)
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

// tickInterval checks idleness often enough for the timeout to hold within
// a quarter of itself.
func tickInterval(idle time.Duration) time.Duration {
	return min(max(idle/4, 10*time.Millisecond), 30*time.Second)
}

// idle reports a live process that serves no round and no login.
func (a *codexActor) idle() bool {
	return a.proc != nil && a.threads.active() == 0 && a.pinned == nil && !a.leased()
}

// leased reports a lease still in force. A lease whose holder gave up
// waiting is never returned, so leases lapse after the longest time a
// holder can take to subscribe or give it back.
func (a *codexActor) leased() bool {
	ttl := acquireWait(a.cfg) + 2*a.cfg.CallTimeout
	for len(a.leases) > 0 && time.Since(a.leases[0]) > ttl {
		a.leases = a.leases[1:]
	}
	return len(a.leases) > 0
}

// holdCap stops this app-server when it is idle and among those the node
// must shed to be back under MaxLive: a start sheds what it can, but a pin
// or a round that ends later leaves the node over the cap until someone
// idle checks again (on unpin, unsubscribe, release and every tick).
func (a *codexActor) holdCap() {
	if !a.idle() {
		return
	}
	for _, v := range a.cfg.live.victims(nil, a.cfg.MaxLive) {
		if v.Equals(a.self) {
			a.cfg.Metrics.Evictions.WithLabelValues("cap").Inc()
			a.evict("the node is over its cap of live app-servers")
			return
		}
	}
}

// touch records a use, for idle eviction and the node's LRU choice.
func (a *codexActor) touch() {
	a.lastUse = time.Now()
	if a.proc != nil {
		a.cfg.live.set(a.self, a.lastUse, !a.idle())
	}
}

func (a *codexActor) acquire(m acquireClient) {
	a.redact.Add(m.secrets...)
	if m.pin != nil {
		a.pinned = m.pin
	}
	a.touch()
	if a.client != nil {
		if _, err := os.Stat(a.home); err != nil {
			// The home was removed under the running CLI (a recreated
			// volume): start afresh, which recreates it and writes the
			// stored key again.
			a.log.Warn("the codex home disappeared; restarting the app-server", "err", err)
			a.evict("its home was removed")
		} else if a.needsKey() {
			if m.lease {
				a.leases = append(a.leases, time.Now())
				a.touch()
			}
			client, gen := a.client, a.gen
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.writeAPIKey(client, false)
				m.reply <- clientReady{client: client, gen: gen}
			}()
			return
		} else {
			if m.lease {
				a.leases = append(a.leases, time.Now())
				a.touch()
			}
			m.reply <- clientReady{client: a.client, gen: a.gen}
			return
		}
	}
	if until, ok := a.restarts.cooling(time.Now()); ok {
		m.reply <- clientReady{err: fmt.Errorf("%w: it died %d times within %v; cooling down until %s",
			ErrUnavailable, a.cfg.RestartLimit, a.cfg.RestartWindow, until.Format(time.TimeOnly))}
		return
	}
	if m.starting != nil {
		a.engine.Send(m.starting, appServerStarting{})
	}
	a.waiters = append(a.waiters, m)
	if !a.starting {
		a.start()
	}
}

// crashed counts an unexpected death; past the limit the user cools down.
func (a *codexActor) crashed() {
	a.restartNext = true
	if a.restarts.crashed(time.Now()) {
		until, _ := a.restarts.cooling(time.Now())
		a.log.Error("codex app-server keeps dying; the user is unavailable for a cool-down",
			"limit", a.cfg.RestartLimit, "window", a.cfg.RestartWindow, "until", until)
	}
}

// backoff is the jittered exponential wait before a restart (see
// restartPolicy.backoff).
func (a *codexActor) backoff() time.Duration {
	return a.restarts.backoff(time.Now(), func(k time.Duration) time.Duration { return rand.N(k + 1) })
}

func (a *codexActor) answerWaiters(r clientReady) {
	for _, w := range a.waiters {
		if w.lease && r.client != nil {
			a.leases = append(a.leases, time.Now())
			a.touch()
		}
		w.reply <- r
	}
	a.waiters = nil
}

// start begins a start attempt, after the backoff if crashes are recent.
func (a *codexActor) start() {
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
func (a *codexActor) launch() {
	gen := a.gen
	engine, self := a.engine, a.self
	cfg := codexrpc.Config{
		Binary:    a.cfg.CodexBin,
		Args:      a.cfg.CodexArgs,
		Home:      a.home,
		Dir:       a.cfg.Workspace,
		Overrides: a.cfg.Overrides,
		Env:       codexrpc.AllowedEnv(environ(), a.cfg.CodexEnv),
		Logger:    a.log,
		Redactor:  a.redact,
		StopGrace: a.cfg.StopGrace,
		Conn: codexrpc.Options{
			Logger: a.log,
			OnNotification: func(n *codexrpc.Notification) {
				engine.Send(self, codexNote{gen: gen, note: n})
			},
			OnRequest: func(ctx context.Context, r *codexrpc.Request) (any, error) {
				reply := make(chan serverAnswer, 2) // a wait, then the answer
				engine.Send(self, codexServerRequest{gen: gen, req: r, reply: reply})
				t := time.NewTimer(10 * time.Second)
				defer t.Stop()
			wait:
				select {
				case ans := <-reply:
					if ans.wait > 0 { // put to the round's caller
						t.Reset(ans.wait)
						goto wait
					}
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
			bin, err := codexrpc.ResolveBinary(cfg.Binary)
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
		p, err := codexrpc.Start(cfg)
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
		client := codexrpc.NewClient(p.Conn())
		if _, err := client.Initialize(ctx, codexrpc.ClientInfo{Name: a.cfg.ClientName, Version: Version}); err != nil {
			a.stopProc(p)
			engine.Send(self, codexStartFailed{gen: gen, err: fmt.Errorf("initializing codex: %w", err)})
			return
		}
		a.writeAPIKey(client, false)
		engine.Send(self, codexStarted{gen: gen, proc: p, client: client})
	}()
}

// watch reports the process's end once its output is drained, so the error
// carries the exit status and the stderr tail, and drops its pid record.
func (a *codexActor) watch(gen uint64, p *codexrpc.Process, record string) {
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

func (a *codexActor) started(m codexStarted) {
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
		a.answerWaiters(clientReady{err: fmt.Errorf("codex app-server %s while starting", m.proc.ExitStatus())})
		a.goStop(m.proc)
		return
	default:
	}
	a.proc, a.client = m.proc, m.client
	a.lastHeard = time.Now()
	a.cfg.Metrics.Starts.Inc()
	if a.restartNext {
		a.cfg.Metrics.Restarts.Inc()
		a.restartNext = false
	}
	a.log.Info("codex app-server ready", "pid", m.proc.PID(), "version", m.client.Version.String())
	a.touch()
	a.answerWaiters(clientReady{client: m.client, gen: m.gen})
	for _, v := range a.cfg.live.victims(a.self, a.cfg.MaxLive) {
		a.engine.Send(v, evictNow{})
	}
}

func (a *codexActor) exited(m codexExited) {
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
	for _, round := range a.threads.reset() {
		a.engine.Send(round, codexLost{err: err})
	}
	if a.pinned != nil {
		a.engine.Send(a.pinned, codexLost{err: err})
		a.pinned = nil
	}
	a.proc, a.client = nil, nil
	a.leases = nil
	a.cfg.live.remove(a.self)
	a.answerWaiters(clientReady{err: err})
}

// evict stops an idle process. Its generation ends here, so its exit is
// not a crash; the next acquire starts a fresh one and rounds resume.
func (a *codexActor) evict(why string) {
	a.log.Info("stopping an idle codex app-server", "pid", a.proc.PID(), "why", why)
	p := a.proc
	a.drop(errors.New("codex app-server stopped: " + why))
	a.goStop(p)
}

// drop ends the current process's generation: every round and the login
// that use it hear lost, and nothing it still says reaches anyone. The
// caller stops the process.
func (a *codexActor) drop(lost error) {
	a.gen++
	for _, round := range a.threads.reset() {
		a.engine.Send(round, codexLost{err: lost})
	}
	if a.pinned != nil {
		a.engine.Send(a.pinned, codexLost{err: lost})
		a.pinned = nil
	}
	a.proc, a.client = nil, nil
	a.leases = nil
	a.cfg.live.remove(a.self)
}

// healthTimeout bounds a health call: a live app-server answers one in
// milliseconds.
func (a *codexActor) healthTimeout() time.Duration {
	return min(a.cfg.CallTimeout, 10*time.Second)
}

// probe makes a health call to the process of generation gen, unless one
// is in flight; the answer comes back as healthChecked.
func (a *codexActor) probe(gen uint64) {
	if gen != a.gen || a.client == nil || a.probeGen == gen {
		return
	}
	a.probeGen = gen
	client, engine, self, d := a.client, a.engine, a.self, a.healthTimeout()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		engine.Send(self, healthChecked{gen: gen, err: client.Ping(ctx)})
	}()
}

// checked acts on a health call's end: a process that did not answer in
// time is hung (stopped, or deadlocked): it is killed, counted as a death
// of its own cause, and the next round starts a fresh one under the
// restart policy.
func (a *codexActor) checked(m healthChecked) {
	if m.gen == a.probeGen {
		a.probeGen = 0
	}
	if m.gen != a.gen || a.proc == nil {
		return
	}
	if m.err == nil {
		a.lastHeard = time.Now()
		return
	}
	if !errors.Is(m.err, context.DeadlineExceeded) {
		return // it died: its exit report is on its way
	}
	p := a.proc
	a.log.Error("codex app-server stopped answering; killing it", "pid", p.PID(), "err", m.err)
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
func (a *codexActor) goStop(p *codexrpc.Process) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.stopProc(p)
	}()
}

// route hands a notification to the round subscribed to its thread.
// Notifications of no thread, or of a thread nobody runs, are kept a little
// while in case the subscription is on its way, then dropped.
func (a *codexActor) route(n *codexrpc.Notification) {
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
	if n.Method == codexrpc.NoteMCPStartupStatus {
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
func (a *codexActor) mcpStartup(threadID string, n *codexrpc.Notification, round *actor.PID) {
	var s codexrpc.MCPStartupStatus
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

// answer decides a server request in-line, or, for a round (or a child
// agent of a round) with on_request ask, hands it to the round's log,
// which answers m.reply itself once its caller did or the deadline passed.
func (a *codexActor) answer(m codexServerRequest) serverAnswer {
	threadID, _ := threadOf(m.req.Params)
	root := a.children.root(threadID) // a child agent's request is its round's
	s, ok := a.threads.lookup(root)
	if ok && a.askers[s.round.ID] != nil {
		log := a.askers[s.round.ID]
		child := ""
		if root != threadID {
			child = threadID
		}
		a.engine.Send(log, serverAsk{req: m.req, child: child, reply: m.reply})
		return serverAnswer{wait: maxAskWait}
	}
	res, question, err := answerServerRequest(m.req, ok && s.autoApprove)
	if question != "" && ok {
		a.engine.Send(s.round, questionAsked{text: question})
	}
	if ok && (m.req.Method == codexrpc.ReqCommandApproval || m.req.Method == codexrpc.ReqFileChangeApproval) {
		a.engine.Send(s.round, approvalAnswered{req: m.req, approved: s.autoApprove})
	}
	return serverAnswer{result: res, err: err}
}

func (a *codexActor) stopProc(p *codexrpc.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*a.cfg.StopGrace)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		a.log.Warn("stopping codex app-server", "pid", p.PID(), "err", err)
	}
}

// needsKey reports a stored API key that the home does not hold.
func (a *codexActor) needsKey() bool {
	if _, err := os.Stat(filepath.Join(a.home, "auth.json")); err == nil {
		return false
	}
	_, ok, err := a.creds.APIKey()
	return err == nil && ok
}

// writeAPIKey writes the user's stored API key into the home through the
// app-server, when there is one and (unless always) the home holds no
// login yet: on a first start, and whenever the home was recreated. It runs
// on a goroutine of the actor's.
func (a *codexActor) writeAPIKey(client *codexrpc.Client, always bool) {
	key, ok, err := a.creds.APIKey()
	if err != nil {
		a.log.Error("reading the stored API key", "err", err)
		return
	}
	if !ok {
		return
	}
	if !always {
		if _, err := os.Stat(filepath.Join(a.home, "auth.json")); err == nil {
			return
		}
	}
	a.redact.Add(key)
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
	defer cancel()
	if _, err := client.LoginStart(ctx, codexrpc.LoginStartParams{Type: codexrpc.LoginAPIKey, APIKey: key}); err != nil {
		a.log.Error("writing the API key into the home", "err", a.redact.Redact(err.Error()))
		return
	}
	a.log.Info("API key written into the home")
}

// shutdown is the destructor: it stops every process this actor started
// and joins every goroutine it owns.
func (a *codexActor) shutdown() {
	if a.delay != nil {
		a.delay.Stop()
	}
	a.mu.Lock()
	a.down = true
	var all []*codexrpc.Process
	for p := range a.live {
		all = append(all, p)
	}
	a.mu.Unlock()
	for _, p := range all {
		a.stopProc(p)
	}
	// A start still in flight sees down and stops what it made.
	a.wg.Wait()
	a.cfg.live.remove(a.self)
	a.answerWaiters(clientReady{err: codexrpc.ErrClosed})
	a.proc, a.client = nil, nil
}
