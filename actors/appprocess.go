package actors

// The app-server actor's process: start (after a backoff), exit, eviction,
// a hung process's kill, the key check before commands run, and the stop
// of everything at the end.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/meshweaver/supervisor/actors/policy"
	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/contain"
	"github.com/meshweaver/supervisor/procs"
)

// crashed counts an unexpected death; past the limit the user cools down.
func (a *appServerActor) crashed() {
	a.restarts.next = true
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

// start begins a start attempt from phaseIdle, after the backoff if
// crashes are recent.
func (a *appServerActor) start() {
	a.gen++
	if d := a.backoff(); d > 0 {
		if !a.enter(phaseBackoff) {
			return
		}
		a.log.Info("restarting codex app-server after a backoff", "delay", d)
		engine, self, gen := a.engine, a.self, a.gen
		a.restarts.delay = time.AfterFunc(d, func() { engine.Send(self, startNow{gen: gen}) })
		return
	}
	if a.enter(phaseStarting) {
		a.launch()
	}
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
		Overrides: a.cfg.codexOverrides(),
		Env:       codexproc.AllowedEnv(environ(), a.cfg.CodexEnv),
		Logger:    a.log,
		Redactor:  a.redact,
		StopGrace: a.cfg.StopGrace,
		Record:    a.record,
		Conn: codexrpc.Options{
			Logger:    a.log,
			OnBadLine: func(k codexrpc.BadLine) { a.cfg.Metrics.BadLines.WithLabelValues(k.String()).Inc() },
			OnNotifications: func(ns []*codexrpc.Notification) {
				engine.Send(self, codexNotes{gen: gen, notes: ns})
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
				return policy.Decline(r.Method)
			},
		},
	}
	// The stored API key is redacted from everything the process says,
	// before it can say anything.
	if key, ok, err := a.creds.APIKey(); err == nil && ok {
		a.redact.Add(key)
	}
	a.spawned.goroutine(func() {
		// A process a killed daemon left behind for this home goes first.
		if reaped, err := procs.ReapRecord(a.record.Path, a.cfg.StopGrace); err != nil {
			a.log.Warn("reaping a leftover app-server", "err", err)
		} else if reaped {
			a.log.Warn("ended an app-server a previous daemon left running")
			a.engine.BroadcastEvent(LeftoverEnded{User: a.user})
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
			if l.Credential != nil && a.cfg.MCPFront != nil {
				// Only this uid may use this user's MCP front URLs.
				a.cfg.MCPFront.SetOwner(a.user, l.Credential.Uid)
			}
			if l.Binary != "" {
				cfg.Binary = l.Binary // reachable by the user's uid
			}
			cfg.Env = setEnv(cfg.Env, l.Env)
			if l.Wrapper != nil {
				cfg.Dir = "/" // bubblewrap changes into the workspace itself
			}
		}
		group, leaf, err := a.contain(&cfg, gen)
		if err != nil {
			engine.Send(self, codexStartFailed{gen: gen, err: fmt.Errorf("starting codex: %w", err)})
			return
		}
		// Start writes the pid record once the process runs; its exit
		// removes it (cfg.Record).
		p, err := codexproc.Start(cfg)
		if err != nil {
			a.emptyLeaf(leaf)
			engine.Send(self, codexStartFailed{gen: gen, err: err})
			return
		}
		if !a.spawned.add(p) { // the actor stopped meanwhile
			a.stopProc(p)
			a.emptyLeaf(leaf)
			return
		}
		go a.watch(gen, p, leaf)

		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
		defer cancel()
		client := codexproto.NewClient(p.Conn())
		if _, err := client.Initialize(ctx, codexproto.ClientInfo{Name: a.cfg.ClientName, Version: Version}); err != nil {
			a.stopProc(p)
			engine.Send(self, codexStartFailed{gen: gen, err: fmt.Errorf("initializing codex: %w", err)})
			return
		}
		engine.Send(self, codexStarted{gen: gen, proc: p, version: client.Version, group: group})
	})
}

// contain readies the start of generation gen in its user's limits: the
// home on its image, and a cgroup for the process inside the user's, which
// the start enters before it runs anything (cfg gets the prefix and, on
// cgroup v2, the folder). It returns the user's group and the process's.
func (a *appServerActor) contain(cfg *codexproc.Config, gen uint64) (group, leaf *contain.Group, err error) {
	if a.cfg.Disk.Size() > 0 {
		uid, gid := os.Getuid(), os.Getgid()
		if c := cfg.Credential; c != nil {
			uid, gid = int(c.Uid), int(c.Gid)
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
		defer cancel()
		if err := a.cfg.Disk.Mount(ctx, a.home, uid, gid); err != nil {
			return nil, nil, err
		}
	}
	n := a.cfg.Contain
	if !n.Active() {
		return nil, nil, nil
	}
	if group, err = n.Group(filepath.Dir(a.home)); err != nil {
		return nil, nil, err
	}
	// A name of its own per start: a restarted actor's generations count
	// from 1 again.
	if leaf, err = group.Child(fmt.Sprintf("p-%d-%d", gen, time.Now().UnixNano())); err != nil {
		return nil, nil, err
	}
	s, err := leaf.Start(cfg.Credential)
	if err != nil {
		a.emptyLeaf(leaf)
		return nil, nil, err
	}
	cfg.Prefix, cfg.CgroupDir = s.Prefix, s.Dir
	if s.SwitchesUID {
		cfg.Credential = nil // the prefix switches, after it joined
	}
	return group, leaf, nil
}

// limitBeforeLoss tells thread's round of a limit its user met, before
// the round hears that the process or its call is gone.
func (a *appServerActor) limitBeforeLoss(thread string) {
	if s, ok := a.threads.router.lookup(thread); ok {
		if res := a.limits.met(thread, a.cfg.Metrics); res != "" {
			a.engine.Send(s.round, limitMet{resource: res})
		}
	}
}

// emptyLeaf kills what is left in a process's cgroup and removes it.
func (a *appServerActor) emptyLeaf(leaf *contain.Group) {
	if leaf == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*a.cfg.StopGrace)
	defer cancel()
	if err := leaf.Remove(ctx); err != nil {
		a.log.Warn("emptying an app-server's cgroup", "err", err)
	}
}

// watch reports the process's end once its output is drained, so the error
// carries the exit status and the stderr tail. (The process removed its
// pid record at its exit.)
func (a *appServerActor) watch(gen uint64, p appProcess, leaf *contain.Group) {
	defer a.spawned.wg.Done()
	<-p.Exited()
	<-p.Conn().Done()
	// What the process started ends with it: descendants that left its
	// process group or session, which its stop does not reach.
	a.emptyLeaf(leaf)
	a.spawned.remove(p)
	a.engine.Send(a.self, codexExited{gen: gen, err: p.Conn().Err()})
}

func (a *appServerActor) started(m codexStarted) {
	if m.gen != a.gen {
		a.goStop(m.proc)
		return
	}
	select {
	case <-m.proc.Exited():
		// It died between initialize and this message; its exit report
		// came first and was set aside (no process yet), so report it here.
		a.crashed()
		a.rest()
		a.log.Warn("codex app-server died while starting", "exit", m.proc.ExitStatus().String())
		a.failQueue(fmt.Errorf("codex app-server %s while starting", m.proc.ExitStatus()))
		a.goStop(m.proc)
		return
	default:
	}
	a.proc, a.version = m.proc, m.version
	if m.group != nil {
		a.limits.group = m.group
	}
	a.health.lastHeard = time.Now()
	a.cfg.Metrics.Starts.Inc()
	if a.restarts.next {
		a.cfg.Metrics.Restarts.Inc()
		a.restarts.next = false
	}
	tested := m.version.Tested()
	if tested {
		a.log.Info("codex app-server ready", "pid", m.proc.PID(), "version", m.version.String())
	} else {
		a.log.Warn("codex app-server ready, but its CLI is outside the tested range", "pid", m.proc.PID(),
			"version", m.version.String(), "tested", codexproto.TestedRange())
	}
	a.engine.BroadcastEvent(AppServerReady{User: a.user, PID: m.proc.PID(), Version: m.version, Tested: tested})
	a.use.last = time.Now()
	a.engine.Send(a.parent, appServerLive{live: true})
	if !a.checkKey() && a.enter(phaseReady) {
		a.flushQueue()
	}
	a.report(true)
}

func (a *appServerActor) exited(m codexExited) {
	// Before the start reported, its goroutine reports the failure itself.
	if m.gen != a.gen || !a.phase.live() {
		return
	}
	err := m.err
	if err == nil {
		err = errors.New("codex app-server ended")
	}
	if !errors.Is(err, codexrpc.ErrClosed) {
		a.log.Warn("codex app-server died", "err", err)
		a.cfg.Metrics.Deaths.Inc() // counted before anyone hears of it
		a.engine.BroadcastEvent(AppServerDied{User: a.user, PID: a.proc.PID()})
		a.crashed()
	}
	a.lose(err)
	a.restartForQueue()
}

// restartForQueue starts a fresh process for the commands still queued
// when the process went (they waited for its key check and never ran on
// it), unless the user cools down.
func (a *appServerActor) restartForQueue() {
	if len(a.queue) == 0 || a.phase.coming() {
		return
	}
	if err := a.cooled(); err != nil {
		a.failQueue(err)
		return
	}
	a.start()
}

// coolingErr says why no start is tried now, or nil.
func (a *appServerActor) coolingErr() error {
	until, ok := a.restarts.cooling(time.Now())
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: it died %d times within %v; cooling down until %s",
		ErrUnavailable, a.cfg.RestartLimit, a.cfg.RestartWindow, until.Format(time.TimeOnly))
}

// evict stops an idle process. Its generation ends here, so its exit is
// not a crash; the next command starts a fresh one and rounds resume.
func (a *appServerActor) evict(why string) {
	a.log.Info("stopping an idle codex app-server", "pid", a.proc.PID(), "why", why)
	a.engine.BroadcastEvent(AppServerEvicted{User: a.user, PID: a.proc.PID(), Why: why, At: time.Now()})
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
	a.restartForQueue()
}

// lose tells everyone who used the process that it is gone: subscribed
// rounds and the pinned login hear lost, calls in flight end with it, and
// the threads it held are forgotten.
func (a *appServerActor) lose(lost error) {
	// A round whose process was killed for memory hears that first.
	for thread := range a.limits.base {
		a.limitBeforeLoss(thread)
	}
	a.threads.asked.reset()
	clear(a.threads.running)
	for _, round := range a.threads.router.reset() {
		a.engine.Send(round, codexLost{err: lost})
	}
	if a.pinned != nil {
		a.engine.Send(a.pinned, codexLost{err: lost})
		a.pinned = nil
	}
	for _, k := range a.calls.inflight {
		delete(a.calls.inflight, k.seq)
		k.timer.Stop()
		if !k.probe {
			k.then(nil, fmt.Errorf("%s: %w", k.method, lost))
		}
	}
	a.health.probing = false
	a.keys.waiting = 0
	a.unloadAll(false)
	a.proc = nil
	a.rest()
	a.gone()
}

// hung acts on a health call that was not answered in time: the process
// of generation gen (stopped, or deadlocked) is killed, counted as a death
// of its own cause, and the next command starts a fresh one under the
// restart policy.
func (a *appServerActor) hung(gen uint64) {
	if gen != a.gen || !a.phase.live() {
		return
	}
	p := a.proc
	a.log.Error("codex app-server stopped answering; killing it", "pid", p.PID())
	a.cfg.Metrics.Deaths.Inc()
	a.cfg.Metrics.Hung.Inc()
	a.crashed()
	a.drop(fmt.Errorf("codex app-server stopped answering (no answer to a health call within %v); it was killed", a.healthTimeout()))
	a.spawned.goroutine(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*a.cfg.StopGrace)
		defer cancel()
		if err := p.Kill(ctx); err != nil {
			a.log.Warn("killing a hung codex app-server", "pid", p.PID(), "err", err)
		}
	})
}

// goStop stops a process on a goroutine the actor owns.
func (a *appServerActor) goStop(p appProcess) {
	a.spawned.goroutine(func() { a.stopProc(p) })
}

func (a *appServerActor) stopProc(p appProcess) {
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
// queue waits, in phaseKeyCheck, for keyChecked, or CallTimeout. It
// reports whether a check began (none without a login actor).
func (a *appServerActor) checkKey() bool {
	if a.login == nil || !a.enter(phaseKeyCheck) {
		return false
	}
	a.keys.seq++
	a.keys.waiting = a.keys.seq
	a.engine.Send(a.login, keyCheck{seq: a.keys.seq})
	engine, self, seq := a.engine, a.self, a.keys.seq
	time.AfterFunc(a.cfg.CallTimeout+time.Second, func() { engine.Send(self, keyChecked{seq: seq}) })
	return true
}

// shutdown is the destructor: it stops every process this actor started
// and joins every goroutine it owns.
func (a *appServerActor) shutdown() {
	a.enter(phaseStopped)
	if a.restarts.delay != nil {
		a.restarts.delay.Stop()
	}
	for _, p := range a.spawned.close() {
		a.stopProc(p)
	}
	// A start still in flight finds the set closed and stops what it made.
	a.spawned.wg.Wait()
	// The user stops here: their cgroup goes when nothing is left in it.
	// Their home stays on its image (a mount costs a cold round tens of
	// milliseconds) until the daemon stops.
	if g := a.limits.group; g != nil {
		g.Release()
	}
	a.engine.Send(a.cap, liveGone{pid: a.self})
	for _, k := range a.calls.inflight {
		k.timer.Stop()
	}
	a.failQueue(codexrpc.ErrClosed)
	a.unloadAll(true)
	a.proc = nil
}
