package actors

// A round's dynamic tools (messages/tools.go): the CLI hands each call of
// one (item/tool/call) to the round's log (askVia), which sends the
// tool's server a ToolCallRequest under a request id nobody can guess and
// answers the CLI with the server's ToolCallResult, or with a tool error
// when none serves the tool, when the server does not answer within
// ToolTimeout, or when the round ends first. A second result for one
// request, or one for a request the log does not know, is dropped.

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// asker is where the app-server actor hands a round's server requests:
// its log; all of them under on_request ask, else only its tools' calls.
type asker struct {
	log *actor.PID
	all bool
}

// toolExpired is a tool call's deadline.
type toolExpired struct{ id string }

// pendingTool is a tool call sent to its server, not answered yet.
type pendingTool struct {
	tool  string
	reply chan serverAnswer
	timer *time.Timer
}

// toolFailure is the CLI's answer to a call that failed: the model reads
// text as the tool's output.
func toolFailure(text string) serverAnswer {
	return serverAnswer{result: codexproto.DynamicToolCallAnswer{Success: false,
		ContentItems: []codexproto.DynamicToolContent{{Type: "inputText", Text: text}}}}
}

// callTool sends a call of one of the round's tools to its server.
func (l *roundLog) callTool(m serverAsk) {
	var p codexproto.DynamicToolCallParams
	if err := json.Unmarshal(m.req.Params, &p); err != nil {
		m.reply <- toolFailure("the daemon could not read the tool call")
		return
	}
	var server *actor.PID
	for _, t := range l.req.Tools {
		if t.Name == p.Tool {
			server = toPID(t.Server)
		}
	}
	switch {
	case l.verdict != nil:
		m.reply <- toolFailure("the round has ended")
		return
	case server == nil:
		l.log.Info("a call of a tool no server of the round serves", "tool", p.Tool)
		m.reply <- toolFailure(fmt.Sprintf("no server for the tool %q in this round", p.Tool))
		return
	}
	if l.tools == nil {
		l.tools = make(map[string]*pendingTool)
	}
	id := "t-" + rand.Text() // only the server it was sent to can answer it
	timeout := l.cfg.ToolTimeout
	engine, self := l.engine, l.self
	l.tools[id] = &pendingTool{tool: p.Tool, reply: m.reply,
		timer: time.AfterFunc(timeout, func() { engine.Send(self, toolExpired{id: id}) })}
	args := string(p.Arguments)
	if args == "" {
		args = "{}"
	}
	req := messages.ToolCallRequest{User: l.req.User, RoundID: l.req.RoundID, RequestID: id, Tool: p.Tool,
		Arguments: args, DeadlineUnixMilli: time.Now().Add(timeout).UnixMilli()}
	env, err := messages.Encode(req)
	if err != nil {
		l.finishTool(id, toolFailure("the daemon could not send the tool call"))
		return
	}
	// From the root: the server answers the daemon's root, whose edge
	// authorizes it (the tools kind for the user).
	l.engine.SendWithSender(server, env, rootOf(l.self))
}

// rootOf is the root actor of the tree pid is in (its id is the root's
// followed by /user/…).
func rootOf(pid *actor.PID) *actor.PID {
	id, _, _ := strings.Cut(pid.ID, "/user/")
	return actor.NewPID(pid.Address, id)
}

// toolResult answers a tool call with its server's result; one the log
// does not know (answered already, expired, forged) is dropped.
func (l *roundLog) toolResult(m messages.ToolCallResult) {
	p := l.tools[m.RequestID]
	if p == nil {
		l.log.Debug("a tool result for no open call", "request", m.RequestID)
		return
	}
	l.finishTool(m.RequestID, serverAnswer{result: codexproto.DynamicToolCallAnswer{Success: m.Success,
		ContentItems: []codexproto.DynamicToolContent{{Type: "inputText", Text: m.Text}}}})
}

// toolExpired fails a call whose server did not answer in time.
func (l *roundLog) toolExpired(m toolExpired) {
	if p := l.tools[m.id]; p != nil {
		l.log.Info("a tool's server did not answer in time", "tool", p.tool, "timeout", l.cfg.ToolTimeout)
		l.finishTool(m.id, toolFailure(fmt.Sprintf("the server of the tool %q did not answer within %v", p.tool, l.cfg.ToolTimeout)))
	}
}

func (l *roundLog) finishTool(id string, ans serverAnswer) {
	p := l.tools[id]
	if p == nil {
		return
	}
	p.timer.Stop()
	delete(l.tools, id)
	p.reply <- ans
}

// closeTools fails every open call (the round ends).
func (l *roundLog) closeTools() {
	for id := range l.tools {
		l.finishTool(id, toolFailure("the round has ended"))
	}
}
