package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/mcpfront"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/store"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// threadOpActor runs one thread command (ReadThread, ArchiveThread,
// ForkThread, CompactThread) for the user actor, as a state machine like
// the round's: it asks the registry for the mesh thread's codex thread,
// has the app-server actor make the call, records what the call changed
// (archive: the record forgotten; fork: the new mesh thread recorded),
// answers reply once and stops. Every step is bounded: the app-server
// actor bounds its calls by CallTimeout, and the whole command is bounded
// by opWait.
type threadOpActor struct {
	cfg      *tree
	cmd      any // the messages.*Thread command
	reply    *actor.PID
	codex    *actor.PID
	registry *actor.PID
	log      *slog.Logger

	engine   *actor.Engine
	self     *actor.PID
	threadID string // the mesh thread's codex thread
	newID    string // a fork's new codex thread
	opened   bool   // compact: the thread is loaded and this actor subscribed
	answered bool
	timer    *time.Timer
}

// Messages of the thread op actor to itself, and its calls' tags.
type (
	threadOpLate struct{}
	threadOpCall struct{}
)

func newThreadOpActor(cfg *tree, cmd any, reply, codex, registry *actor.PID, log *slog.Logger) actor.Producer {
	return func() actor.Receiver {
		return &threadOpActor{cfg: cfg, cmd: cmd, reply: reply, codex: codex, registry: registry,
			log: log.With("op", fmt.Sprintf("%T", cmd))}
	}
}

// opKey is the mesh thread a command is about.
func opKey(cmd any) string {
	switch m := cmd.(type) {
	case messages.ReadThread:
		return m.Thread
	case messages.ArchiveThread:
		return m.Thread
	case messages.ForkThread:
		return m.Thread
	case messages.CompactThread:
		return m.Thread
	}
	return ""
}

// opWait bounds a whole thread command: a process start, an open, a call
// and the registry.
func opWait(cfg *tree) time.Duration { return 2*openWait(cfg) + cfg.CallTimeout }

func (o *threadOpActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		o.engine, o.self = c.Engine(), c.PID()
		engine, self := o.engine, o.self
		o.timer = time.AfterFunc(opWait(o.cfg), func() { engine.Send(self, threadOpLate{}) })
		_, compact := o.cmd.(messages.CompactThread) // a compaction asks the model
		c.Send(o.registry, lookupThread{key: opKey(o.cmd), round: c.PID(), admit: compact})
	case actor.Stopped:
		o.timer.Stop()
		o.finish(fmt.Errorf("the daemon is stopping"))
	case threadOpLate:
		o.finish(fmt.Errorf("the thread command did not finish within %v", opWait(o.cfg)))
	case threadLookup:
		o.looked(m)
	case threadOpenResult:
		o.threadOpened(m)
	case appAnswer:
		o.callAnswered(m)
	case roundNote:
		o.onNote(m.note)
	case roundNotes:
		for _, n := range m.notes {
			o.onNote(n)
		}
	case saved:
		o.finish(m.err)
	}
}

// onNote takes a notification of the thread. compact: the compaction runs
// as a turn; its end is the answer.
func (o *threadOpActor) onNote(n *codexrpc.Notification) {
	if n.Method == codexproto.NoteTurnCompleted {
		o.finish(compactEnd(n.Params))
	}
}

// looked makes the call once the registry named the codex thread (a fork
// first checks that its new mesh thread is free).
func (o *threadOpActor) looked(l threadLookup) {
	if o.answered {
		return
	}
	if l.budget != nil {
		o.finish(errors.New(budgetText(l.budget)))
		return
	}
	if l.lowDisk != "" {
		o.finish(errors.New(l.lowDisk))
		return
	}
	if fork, ok := o.cmd.(messages.ForkThread); ok && l.key == fork.NewThread {
		if l.threadID != "" {
			o.finish(fmt.Errorf("new_thread %s already exists", store.KeyPrefix(fork.NewThread)))
			return
		}
		o.call(codexproto.MethodThreadFork, codexproto.ThreadForkParams{ThreadID: o.threadID, ExcludeTurns: true})
		return
	}
	if l.threadID == "" {
		o.finish(fmt.Errorf("the daemon has no codex thread for this mesh thread"))
		return
	}
	o.threadID = l.threadID
	switch m := o.cmd.(type) {
	case messages.ReadThread:
		o.call(codexproto.MethodThreadRead, codexproto.ThreadReadParams{ThreadID: o.threadID, IncludeTurns: true})
	case messages.ArchiveThread:
		o.call(codexproto.MethodThreadArchive, codexproto.ThreadIDParams{ThreadID: o.threadID})
	case messages.ForkThread:
		o.engine.Send(o.registry, lookupThread{key: m.NewThread, round: o.self})
	case messages.CompactThread:
		// Compaction needs the thread loaded: it is opened like a round's
		// (with no MCP back-connection), and this actor hears its turn.
		o.engine.Send(o.codex, openThread{round: o.self, threadID: o.threadID, settings: roundSettings(o.cfg, mcpfront.Key{}, "", "", "")}) // no MCP: no key of the front
	}
}

func (o *threadOpActor) call(method string, params any) {
	o.engine.Send(o.codex, appCall{method: method, params: params, thread: o.threadID, to: o.self, tag: threadOpCall{}})
}

func (o *threadOpActor) threadOpened(m threadOpenResult) {
	if o.answered {
		return
	}
	if m.err != nil {
		o.finish(fmt.Errorf("opening the codex thread: %w", m.err))
		return
	}
	o.opened = true
	o.call(codexproto.MethodThreadCompactStart, codexproto.ThreadIDParams{ThreadID: o.threadID})
}

// callAnswered handles the answer of the command's call.
func (o *threadOpActor) callAnswered(m appAnswer) {
	if o.answered {
		return
	}
	if m.err != nil {
		o.finish(fmt.Errorf("%s: %w", opMethod(o.cmd), m.err))
		return
	}
	switch cmd := o.cmd.(type) {
	case messages.ReadThread:
		turns, err := threadTurns(m.result)
		if err != nil {
			o.finish(err)
			return
		}
		o.answered = true
		deliver(o.engine, o.reply, messages.ThreadTurns{Thread: cmd.Thread, CodexThreadID: o.threadID, Turns: turns}, o.log)
		o.engine.Poison(o.self)
	case messages.ArchiveThread:
		o.engine.Send(o.registry, forgetThread{key: cmd.Thread})
		o.finish(nil)
	case messages.ForkThread:
		var res codexproto.ThreadResult
		if err := decodeResult(codexproto.MethodThreadFork, m.result, &res); err != nil || res.Thread.ID == "" {
			o.finish(fmt.Errorf("thread/fork answered no thread: %v", err))
			return
		}
		o.newID = res.Thread.ID
		o.engine.Send(o.registry, recordThread{key: cmd.NewThread, threadID: o.newID, round: o.self})
	case messages.CompactThread:
		// Started: the answer waits for the compaction's turn to end, so
		// that the thread's next round does not run into it.
	}
}

// finish answers the command once (err nil: done) and stops the actor.
func (o *threadOpActor) finish(err error) {
	if o.answered {
		return
	}
	o.answered = true
	if o.opened {
		o.engine.Send(o.codex, unsubscribe{threadID: o.threadID, round: o.self, keep: err == nil})
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		o.log.Info("thread command failed", "err", err)
	}
	var ans any
	switch m := o.cmd.(type) {
	case messages.ReadThread:
		ans = messages.ThreadTurns{Thread: m.Thread, CodexThreadID: o.threadID, Error: msg}
	case messages.ArchiveThread:
		ans = messages.ThreadArchived{Thread: m.Thread, OK: err == nil, Error: msg}
	case messages.ForkThread:
		ans = messages.ThreadForked{Thread: m.Thread, NewThread: m.NewThread, CodexThreadID: o.newID, Error: msg}
		if err != nil {
			ans = messages.ThreadForked{Thread: m.Thread, NewThread: m.NewThread, Error: msg}
		}
	case messages.CompactThread:
		ans = messages.ThreadCompacted{Thread: m.Thread, OK: err == nil, Error: msg}
	}
	deliver(o.engine, o.reply, ans, o.log)
	if o.self != nil {
		o.engine.Poison(o.self)
	}
}

// compactEnd is the outcome of a compaction's turn/completed: nil when
// it completed.
func compactEnd(params json.RawMessage) error {
	var t codexproto.TurnNotification
	if err := json.Unmarshal(params, &t); err != nil {
		return fmt.Errorf("the compaction's end is unreadable: %w", err)
	}
	if t.Turn.Status == codexproto.TurnCompleted {
		return nil
	}
	msg := "the compaction ended " + t.Turn.Status
	if t.Turn.Error != nil && t.Turn.Error.Message != "" {
		msg += ": " + t.Turn.Error.Message
	}
	return errors.New(msg)
}

func opMethod(cmd any) string {
	switch cmd.(type) {
	case messages.ReadThread:
		return codexproto.MethodThreadRead
	case messages.ArchiveThread:
		return codexproto.MethodThreadArchive
	case messages.ForkThread:
		return codexproto.MethodThreadFork
	}
	return codexproto.MethodThreadCompactStart
}

// threadTurns are the user and assistant messages of thread/read's
// answer, oldest first; other items (tools, reasoning) are left out.
func threadTurns(raw json.RawMessage) ([]messages.Turn, error) {
	var res codexproto.ThreadReadResult
	if err := decodeResult(codexproto.MethodThreadRead, raw, &res); err != nil {
		return nil, err
	}
	var out []messages.Turn
	for _, m := range res.Messages() {
		role := messages.RoleAssistant
		if m.User {
			role = messages.RoleUser
		}
		out = append(out, messages.Turn{Role: role, Text: m.Text})
	}
	return out, nil
}

// threadOp runs a thread command in its own actor. A command that changes
// the thread (archive, fork, compact) waits for no round: it is refused
// while one runs or waits on the thread.
func (u *userActor) threadOp(c *actor.Context, cmd any) {
	if _, read := cmd.(messages.ReadThread); !read {
		if ts := u.threads[opKey(cmd)]; ts != nil && (ts.active != nil || len(ts.queue) > 0) {
			o := &threadOpActor{cmd: cmd, engine: c.Engine(), reply: c.Sender(), log: u.log}
			o.finish(fmt.Errorf("a round runs on the thread; try again when it has finished"))
			return
		}
	}
	u.seq++
	c.SpawnChild(newThreadOpActor(u.cfg, cmd, c.Sender(), u.codex, u.registry, u.log), "threadop",
		spawnOpts(fmt.Sprintf("op%d", u.seq), u.log, nil)...)
}
