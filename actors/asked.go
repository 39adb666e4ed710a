package actors

import (
	"encoding/json"
	"fmt"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// Every turn an app-server runs is the daemon's: a round's turn/start or a
// thread command's compaction asked for it. A turn the CLI starts on its
// own (a codex goal continuing after its round's verdict, or whatever a
// later CLI adds) is a turn no caller sees and no round bounds: the
// app-server actor counts it, logs it and, unless Config.UnaskedTurns
// allows it, interrupts it at once.

// Unasked-turn policies (Config.UnaskedTurns).
const (
	UnaskedInterrupt = "interrupt" // the default: interrupted at once
	UnaskedAllow     = "allow"     // counted and logged, left to run
)

// startsTurn reports whether a call of method makes the CLI run a turn.
func startsTurn(method string) bool {
	return method == codexproto.MethodTurnStart || method == codexproto.MethodThreadCompactStart
}

// askedTurns is the turn-starting calls the app-server actor sent for each
// thread whose turn/started has not come yet, oldest first. A turn/started
// takes the oldest; a call that failed takes itself back (no turn comes of
// it). Either order of a call's answer and its turn/started is covered:
// the call is counted from when it is sent. It is a plain value owned by
// the app-server actor: no messages, no clock.
type askedTurns struct {
	pending map[string][]uint64 // thread → the seqs of its calls
}

// asked counts call seq, which starts a turn on thread.
func (t *askedTurns) asked(thread string, seq uint64) {
	if t.pending == nil {
		t.pending = make(map[string][]uint64)
	}
	t.pending[thread] = append(t.pending[thread], seq)
}

// failed takes back call seq on thread: it failed, so no turn comes of
// it (unless its turn/started came already and took it).
func (t *askedTurns) failed(thread string, seq uint64) {
	calls := t.pending[thread]
	for i, s := range calls {
		if s == seq {
			t.set(thread, append(calls[:i:i], calls[i+1:]...))
			return
		}
	}
}

// started takes a turn/started of thread and reports whether a call asked
// for it.
func (t *askedTurns) started(thread string) bool {
	calls := t.pending[thread]
	if len(calls) == 0 {
		return false
	}
	t.set(thread, calls[1:])
	return true
}

func (t *askedTurns) set(thread string, calls []uint64) {
	if len(calls) == 0 {
		delete(t.pending, thread)
		return
	}
	t.pending[thread] = calls
}

// reset forgets every call (the process is gone).
func (t *askedTurns) reset() { t.pending = nil }

// UnaskedTurn is broadcast on the engine's event stream for every turn an
// app-server started that no round or thread command asked for.
// Interrupted says the daemon interrupted it (Config.UnaskedTurns
// interrupt); Round is whether a round was subscribed to the thread when
// it started (a goal continues right after its round's turn ends).
type UnaskedTurn struct {
	User        string
	ThreadID    string
	TurnID      string
	Interrupted bool
	Round       bool
}

// budgetMet interrupts every running turn of the user's: a round's
// through the round (its verdict says why), any other at once.
func (a *appServerActor) budgetMet(m budgetMet) {
	for thread, turn := range a.threads.running {
		root := a.threads.children.Root(thread)
		if s, ok := a.threads.router.lookup(root); ok {
			if root == thread {
				a.engine.Send(s.round, m)
			}
			continue // a child agent's turn ends with its round's
		}
		a.log.Warn("interrupting a turn no round runs: the user's token budget is spent", "thread", thread, "turn", turn)
		a.call(codexproto.MethodTurnInterrupt, codexproto.TurnInterruptParams{ThreadID: thread, TurnID: turn}, "",
			func(_ json.RawMessage, err error) {
				if err != nil {
					a.log.Warn("interrupting a turn past the budget", "err", err)
				}
			})
	}
}

// callTurn sends a call of another actor's; a turn-starting one is
// counted as asked for its thread until its turn/started comes.
func (a *appServerActor) callTurn(m appCall, then func(json.RawMessage, error)) {
	if !startsTurn(m.method) || m.thread == "" {
		a.call(m.method, m.params, m.thread, then)
		return
	}
	var seq uint64
	answered := false // at once, when there is no process to send it to
	seq = a.call(m.method, m.params, m.thread, func(res json.RawMessage, err error) {
		answered = true
		if err != nil {
			a.threads.asked.failed(m.thread, seq)
		}
		then(res, err)
	})
	if !answered {
		a.threads.asked.asked(m.thread, seq)
	}
}

// turnStarted takes a turn/started of one of the process's threads. A
// child agent's turn is its round's when a round runs on the root thread;
// a root thread's turn is asked for when a call of the daemon's started
// it. Any other is an unasked turn.
func (a *appServerActor) turnStarted(threadID, root string, n *codexrpc.Notification) {
	var note codexproto.TurnNotification
	_ = json.Unmarshal(n.Params, &note)
	if note.Turn.ID != "" {
		a.threads.running[threadID] = note.Turn.ID
	}
	_, subscribed := a.threads.router.lookup(root)
	if root != threadID {
		if subscribed {
			return
		}
	} else if a.threads.asked.started(threadID) {
		return
	}
	ev := UnaskedTurn{User: a.user, ThreadID: threadID, TurnID: note.Turn.ID, Round: subscribed,
		Interrupted: a.cfg.UnaskedTurns != UnaskedAllow && note.Turn.ID != ""}
	a.cfg.Metrics.UnaskedTurns.WithLabelValues(map[bool]string{true: "interrupted", false: "allowed"}[ev.Interrupted]).Inc()
	log := a.log.With("thread", threadID, "turn", note.Turn.ID, "round_running", subscribed)
	if ev.Interrupted {
		log.Warn("interrupting a turn no round started (a codex goal continuing?)")
		a.call(codexproto.MethodTurnInterrupt, codexproto.TurnInterruptParams{ThreadID: threadID, TurnID: note.Turn.ID}, "",
			func(_ json.RawMessage, err error) {
				if err != nil {
					log.Warn("interrupting a turn no round started", "err", err)
				}
			})
	} else {
		log.Warn("a turn no round started runs (--unasked-turns allow)")
	}
	a.engine.BroadcastEvent(ev)
}

// codexCall tags the app-server actor's own call for a CodexRequest.
type codexCall struct {
	to     *actor.PID
	method string
}

// codexRequest passes an authorized caller's call of one of the methods
// messages.CodexReads and CodexControls name to the CLI (starting it if
// need be, as any command); codexAnswered answers it.
func (a *appServerActor) codexRequest(to *actor.PID, m messages.CodexRequest) {
	params := json.RawMessage(m.Params)
	if m.Params == "" {
		params = json.RawMessage("{}")
	}
	a.command(appCall{method: m.Method, params: params, to: a.self, tag: codexCall{to: to, method: m.Method}})
}

// codexAnswered answers a CodexRequest with the CLI's result, every
// secret the actor knows of (the API key, the rounds' MCP tokens)
// redacted.
func (a *appServerActor) codexAnswered(tag codexCall, res json.RawMessage, err error) {
	resp := messages.CodexResponse{User: a.user, Method: tag.method}
	switch {
	case err != nil:
		resp.Error = a.redact.Redact(err.Error())
	case len(res) > messages.MaxCodexResult:
		resp.Error = fmt.Sprintf("the result is %d bytes, over %d", len(res), messages.MaxCodexResult)
	default:
		resp.Result = a.redact.Redact(string(res))
	}
	deliver(a.engine, tag.to, resp, a.log)
}
