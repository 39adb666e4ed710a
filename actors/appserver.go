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
	cfg  *Config
	user string
	home string
	log  *slog.Logger

	engine   *actor.Engine
	self     *actor.PID
	ticker   actor.SendRepeater
	routed   routed           // a batch's notifications for one round, not yet sent (see toRound)
	lastHead codexproto.Delta // the last notification's header: its ids' strings are reused

	gen      uint64
	proc     appProcess
	version  codexproto.Version // the current process's CLI version
	starting bool
	queue    []any // openThread and appCall waiting for a ready process
	threads  threadRouter
	children eventmap.ChildThreads   // child agents' threads → their parents
	askers   map[string]*actor.PID   // round actor id → its log, for rounds that ask (askVia)
	loaded   map[string]loadedThread // threads the current process holds
	opening  map[mcpfront.Key]int    // opens in flight holding a front key (settings.go)
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
	limits       limitWatch  // the user's cgroup and what each round met of it

	// Goroutines: start attempts, exit watchers and stops. Processes a
	// start produced are in live until stopped, so Stopped can end even
	// those whose start message never arrived.
	wg   sync.WaitGroup
	mu   sync.Mutex
	live map[appProcess]struct{}
	down bool
	// recMu orders the start goroutines' writes of the pid record and the
	// exit watchers' read-compare-remove of it.
	recMu sync.Mutex
}

func newAppServerActor(cfg *Config, user, home string, creds *store.Credentials, registry, cap *actor.PID) actor.Producer {
	return func() actor.Receiver {
		return &appServerActor{
			cfg: cfg, user: user, home: home, creds: creds, redact: &codexproc.Redactor{}, registry: registry, cap: cap,
			limits:   limitWatch{disk: cfg.Disk, home: home},
			warming:  make(map[string][]warmUp),
			restarts: newRestartPolicy(cfg),
			log:      cfg.Logger.With("user", userTag(user), "actor", "appserver"),
			threads:  newThreadRouter(maxEarlyNotes),
			loaded:   make(map[string]loadedThread),
			opening:  make(map[mcpfront.Key]int),
			calls:    make(map[uint64]*call),
			live:     make(map[appProcess]struct{}),
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
	case messages.UsageRequest:
		deliver(a.engine, c.Sender(), a.limits.usage(a.user, a.cfg.Contain), a.log)
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
	case askVia:
		if a.askers == nil {
			a.askers = make(map[string]*actor.PID)
		}
		a.askers[m.round.ID] = m.log
	case askViaGone:
		delete(a.askers, m.round.ID)
	case codexNotes:
		if m.gen == a.gen {
			a.lastHeard = time.Now()
			a.touch()
			for _, n := range m.notes {
				a.route(n)
			}
			a.sendRouted()
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
			res, err := policy.Decline(m.req.Method)
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
		if err := a.coolingErr(); err != nil {
			a.refuse(m, err)
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
