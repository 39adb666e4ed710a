package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/meshweaver/supervisor/actors/eventmap"
	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
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
	// in wire order with the process's notifications (codexNotes).
	callDone struct {
		seq    uint64
		result json.RawMessage
		err    error
	}
	callExpired struct{ seq uint64 } // call seq's deadline passed
	callRetry   struct{ seq uint64 } // call seq was refused as overloaded; send it again
)

// appProcess is what the app-server actor needs of its process: a
// *codexproc.Process (a stand-in in tests of the actor's clock).
type appProcess interface {
	Conn() *codexrpc.Conn
	PID() int
	Exited() <-chan struct{}
	ExitStatus() codexrpc.ExitStatus
	Stop(ctx context.Context) error
	Kill(ctx context.Context) error
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
	appWiring // what it was given, and whom it talks to

	// The process lifecycle. The rule: no boolean encodes a phase. phase
	// is the only record of where the lifecycle is (appphase.go), enter
	// its only writer, and the fields after it hold the data of some
	// phases. The booleans left are not phases: restarts.next (which
	// counter a start goes to), health.probing (a call in flight, in
	// either live phase), use.busy (what the cap actor was told) and
	// spawned.closed (Stopped's word to the goroutines, which cannot read
	// phase).
	phase   appPhase
	gen     uint64             // bumped by every start and every drop: older processes' messages are dropped
	proc    appProcess         // the process, in phaseKeyCheck and phaseReady
	version codexproto.Version // its CLI version
	queue   []any              // commands (openThread, appCall, warmUp) waiting for phaseReady

	keys     keyChecks   // the login actor's key checks (phaseKeyCheck)
	restarts appRestarts // deaths, backoff and cool-down
	health   appHealth   // whether the process still answers
	use      capReport   // the use the cap actor heard of
	calls    callTable   // calls to the process in flight
	threads  appThreads  // the threads it holds, and the routing of their notifications
	limits   limitWatch  // the user's cgroup and what each round met of it
	spawned  appSpawned  // the goroutines it started, and the processes they made
}

// appWiring is what the app-server actor is given, and the actors it
// talks to: fixed for its life, but for login and pinned, which the user
// actor and the login actor set.
type appWiring struct {
	cfg    *tree
	user   string
	home   string
	log    *slog.Logger
	creds  *store.Credentials
	redact *codexproc.Redactor  // every secret the process might echo
	record *codexproc.PidRecord // the home's pid record, written and removed by each process

	engine   *actor.Engine
	self     *actor.PID
	ticker   actor.SendRepeater // tick
	parent   *actor.PID         // the user actor
	cap      *actor.PID         // the node's cap actor
	registry *actor.PID         // the user's registry, for a warm-up's thread
	login    *actor.PID         // the login actor, which sets the home's credentials up
	pinned   *actor.PID         // the login actor during a session
}

// keyChecks are the key checks asked of the login actor: seq numbers
// them, waiting is the one the queue waits for in phaseKeyCheck (0 in
// every other phase).
type keyChecks struct {
	seq, waiting uint64
}

// appRestarts is the restart policy with what the actor adds to it: the
// timer of a backed-off start (phaseBackoff), and whether the next start
// follows a death (it is then counted as a restart).
type appRestarts struct {
	restartPolicy
	delay *time.Timer
	next  bool
}

// appHealth is what shows that the process still answers: when it last
// said something, and whether a health call is in flight (its deadline
// passing means hung; it is not a phase, as it may run during a key
// check).
type appHealth struct {
	lastHeard time.Time
	probing   bool
}

// capReport is the process's use as the cap actor knows it: the last use,
// the last one reported, and whether it was reported busy.
type capReport struct {
	last     time.Time
	reported time.Time
	busy     bool
}

// callTable is the calls to the process in flight, by their seq.
type callTable struct {
	inflight map[uint64]*call
	seq      uint64
}

// appThreads is the threads of the process, and the routing of their
// notifications and server requests to rounds.
type appThreads struct {
	router   threadRouter            // thread → its subscribed round, and the early notes
	children eventmap.ChildThreads   // child agents' threads → their parents
	askers   map[string]asker        // round actor id → its log, for rounds that ask or serve tools (askVia)
	loaded   map[string]loadedThread // threads the current process holds
	opening  map[mcpfront.Key]int    // opens in flight holding a front key (settings.go)
	warming  map[string][]warmUp     // warm-ups waiting for their registry lookup, by mesh thread
	routed   routed                  // a batch's notifications for one round, not yet sent (see toRound)
	asked    askedTurns              // turn-starting calls whose turn/started has not come (asked.go)
	running  map[string]string       // thread → its running turn, from turn/started to turn/completed
	// rateLimits is the account's rate limits as last reported, for usage.
	rateLimits *codexproto.RateLimitSnapshot
	lastHead   codexproto.Delta // the last notification's header: its ids' strings are reused
}

// appSpawned is what the actor shares with the goroutines it starts
// (start attempts, exit watchers, stops, kills): wg counts them, and live
// holds the processes the starts made until they exit, so that Stopped
// can stop even those whose start message never arrived. mu guards live
// and closed. closed is Stopped's word to the goroutines, which cannot
// read the phase: a start that ends after it stops what it made.
type appSpawned struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	live   map[appProcess]struct{}
	closed bool
}

// goroutine runs f on a goroutine that Stopped joins.
func (s *appSpawned) goroutine(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// add keeps p until remove, and counts its exit watcher, which the
// caller then starts; it reports false, and keeps nothing, once the set
// is closed.
func (s *appSpawned) add(p appProcess) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.live == nil {
		s.live = make(map[appProcess]struct{})
	}
	s.live[p] = struct{}{}
	s.wg.Add(1)
	return true
}

// remove forgets p, which exited.
func (s *appSpawned) remove(p appProcess) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, p)
}

// close ends the set: it returns the processes still live, and add
// refuses any more.
func (s *appSpawned) close() []appProcess {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var all []appProcess
	for p := range s.live {
		all = append(all, p)
	}
	return all
}

func newAppServerActor(cfg *tree, user, home string, creds *store.Credentials, registry, cap *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &appServerActor{
			appWiring: appWiring{
				cfg: cfg, user: user, home: home, creds: creds, redact: &codexproc.Redactor{},
				record:   &codexproc.PidRecord{Path: ProcRecordPath(home), Member: cfg.Member},
				log:      cfg.Logger.With("user", userTag(user), "actor", "appserver"),
				registry: registry, cap: cap,
			},
			limits:   limitWatch{disk: cfg.Disk, home: home},
			restarts: appRestarts{restartPolicy: newRestartPolicy(cfg)},
			calls:    callTable{inflight: make(map[uint64]*call)},
			threads: appThreads{
				router:  newThreadRouter(maxEarlyNotes),
				loaded:  make(map[string]loadedThread),
				opening: make(map[mcpfront.Key]int),
				warming: make(map[string][]warmUp),
				running: make(map[string]string),
			},
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
	case messages.CodexRequest:
		a.codexRequest(c.Sender(), m)
	case appAnswer: // the answer to one of its own commands' calls
		if tag, ok := m.tag.(codexCall); ok {
			a.codexAnswered(tag, m.result, m.err)
		}
	case messages.UsageRequest: // the registry adds the ledger and answers
		resp := a.limits.usage(a.user, a.cfg.Contain)
		if a.threads.rateLimits != nil {
			resp.RateLimits = []messages.RateLimit{eventmap.RateLimit(*a.threads.rateLimits)}
		}
		a.engine.Send(a.registry, usageTokens{resp: resp, to: c.Sender()})
	case threadLookup:
		a.looked(m)
	case budgetMet:
		a.budgetMet(m)
	case startNow:
		if m.gen == a.gen && a.phase == phaseBackoff && a.enter(phaseStarting) {
			a.launch()
		}
	case codexStarted:
		a.started(m)
	case codexStartFailed:
		if m.gen != a.gen {
			return
		}
		a.crashed()
		a.rest()
		a.log.Warn("codex app-server failed to start", "err", m.err)
		a.failQueue(m.err)
	case codexExited:
		a.exited(m)
	case askVia:
		if a.threads.askers == nil {
			a.threads.askers = make(map[string]asker)
		}
		a.threads.askers[m.round.ID] = asker{log: m.log, all: m.all}
	case askViaGone:
		delete(a.threads.askers, m.round.ID)
	case codexNotes:
		if m.gen == a.gen {
			a.health.lastHeard = time.Now()
			a.touch()
			for _, n := range m.notes {
				a.route(n)
			}
			a.sendRouted()
		}
	case callDone:
		if k := a.calls.inflight[m.seq]; k != nil {
			if k.gen == a.gen {
				a.health.lastHeard = time.Now()
			}
			a.answered(k, m.result, m.err)
		}
	case callExpired:
		a.expired(m.seq)
	case callRetry:
		if k := a.calls.inflight[m.seq]; k != nil {
			a.send(k)
		}
	case codexServerRequest:
		if m.gen != a.gen {
			// A process on its way out: its requests get the safe answer.
			res, err := policy.Decline(m.req.Method)
			m.reply <- serverAnswer{result: res, err: err}
			return
		}
		m.reply <- a.answer(m)
	case unsubscribe:
		a.threads.router.unsubscribe(m.threadID, m.round)
		if lt, ok := a.threads.loaded[m.threadID]; ok && m.keep {
			lt.lastUse = time.Now()
			a.threads.loaded[m.threadID] = lt
		} else {
			// A round that ended without its turn's end (a stall, a failed
			// start, the daemon stopping) may leave the turn running: the
			// next round reloads the thread rather than join it.
			a.unload(m.threadID)
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
		if a.phase == phaseKeyCheck && m.seq == a.keys.waiting {
			a.keys.waiting = 0
			a.enter(phaseReady)
			a.flushQueue()
		}
	case tick:
		_ = a.cooled()
		a.unloadIdle()
		if (a.threads.router.active() > 0 || len(a.calls.inflight) > 0) && time.Since(a.health.lastHeard) >= a.healthTimeout() {
			// Rounds wait on (or are opening threads in) a process that
			// has said nothing for a health call's length: make sure it
			// still answers, before their calls run out of time.
			a.probe()
		}
		switch {
		case !a.idle():
		case time.Since(a.use.last) >= a.cfg.IdleTimeout:
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
		if a.phase.live() && !a.exitedUnreported() {
			a.run(m)
		} else if !c.ifLive {
			a.refuse(m, errors.New("no codex app-server is running"))
		}
		return
	}
	if a.phase.live() {
		if _, err := os.Stat(a.home); err != nil {
			// The home was removed under the running CLI (a recreated
			// volume): start afresh, which recreates it and has the stored
			// key written again.
			a.log.Warn("the codex home disappeared; restarting the app-server", "err", err)
			a.evict("its home was removed")
		} else if a.phase == phaseReady {
			a.checkKey()
		}
	}
	switch a.phase {
	case phaseReady:
		a.run(m)
		return
	case phaseIdle, phaseCooling:
		if err := a.cooled(); err != nil {
			a.refuse(m, err)
			return
		}
	}
	if o, ok := m.(openThread); ok && !a.phase.live() {
		a.engine.Send(o.round, appServerStarting{})
	}
	a.queue = append(a.queue, m)
	if a.phase == phaseIdle {
		a.start()
	}
}

// run carries out a command on the ready process.
func (a *appServerActor) run(m any) {
	if a.exitedUnreported() {
		// It waits for the fresh process the exit report starts for what
		// is queued (restartForQueue), rather than failing on this one.
		a.queue = append(a.queue, m)
		return
	}
	switch m := m.(type) {
	case openThread:
		a.open(m)
	case appCall:
		to, tag := m.to, m.tag
		a.callTurn(m, func(res json.RawMessage, err error) {
			if to != nil {
				a.engine.Send(to, appAnswer{tag: tag, result: res, err: err})
			}
		})
	case warmUp:
		a.warm(m)
	}
}

// exitedUnreported reports a process that has exited while its exit
// report (codexExited) has not come yet: the watcher sends it once the
// process's output is drained and its cgroup emptied, which takes a
// moment after a kill (the cgroup is frozen, killed and removed). A call
// sent to it meanwhile fails at once with its exit status: the next round
// after an OOM kill failed with "codex app-server was killed by signal
// SIGKILL while awaiting thread/start", naming the killed process's
// death, not a kill of a new one.
func (a *appServerActor) exitedUnreported() bool {
	if a.proc == nil || !a.phase.live() {
		return false
	}
	select {
	case <-a.proc.Exited():
		return true
	default:
		return false
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

// tickInterval checks idleness often enough for the timeout to hold within
// a quarter of itself.
func tickInterval(idle time.Duration) time.Duration {
	return min(max(idle/4, 10*time.Millisecond), 30*time.Second)
}

// idle reports a live process that serves no round and no login, and
// has no call in flight or waiting.
func (a *appServerActor) idle() bool {
	return a.phase.live() && a.threads.router.active() == 0 && a.pinned == nil && len(a.calls.inflight) == 0 && len(a.queue) == 0
}

// holdCap reports this app-server's use to the cap actor, which asks the
// least recently used idle ones to stop when the node is over MaxLive: a
// start sheds what it can, and a pin or a round that ends later leaves the
// node over the cap until an app-server reports itself idle (on unpin,
// unsubscribe, a call's end and every tick).
func (a *appServerActor) holdCap() {
	if a.phase.live() {
		a.report(false)
	}
}

// touch records a use, for idle eviction and the node's LRU choice. The
// cap actor hears of it when the process turns busy or idle, and at most
// once a second otherwise.
func (a *appServerActor) touch() {
	a.use.last = time.Now()
	if a.phase.live() && (a.idle() == a.use.busy || a.use.last.Sub(a.use.reported) >= time.Second) {
		a.report(false)
	}
}

// report tells the cap actor about the live process.
func (a *appServerActor) report(started bool) {
	busy := !a.idle()
	a.use.reported, a.use.busy = a.use.last, busy
	a.engine.Send(a.cap, liveUse{pid: a.self, lastUse: a.use.last, busy: busy, started: started})
}

// gone tells the cap actor (and the user actor) that the process is gone.
func (a *appServerActor) gone() {
	a.engine.Send(a.cap, liveGone{pid: a.self})
	a.engine.Send(a.parent, appServerLive{live: false})
}
