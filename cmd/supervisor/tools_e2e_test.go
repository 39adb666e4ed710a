package main

import (
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// TestDynamicToolOverTheRemote: a round's tool served by an actor of the
// caller's own engine, across hollywood's remote: the daemon's
// ToolCallRequest crosses the wire to it, its ToolCallResult comes back
// through the edge (kind tools) to the round, and the model reads it.
func TestDynamicToolOverTheRemote(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan messages.ToolCallRequest, 2)
	server := e.c.engine.SpawnFunc(func(c *actor.Context) {
		u, err := messages.Unwrap(c.Message())
		if err != nil {
			return
		}
		req, ok := u.(messages.ToolCallRequest)
		if !ok {
			return
		}
		got <- req
		env, err := messages.Encode(messages.ToolCallResult{User: req.User, RoundID: req.RoundID, RequestID: req.RequestID,
			Success: true, Text: "served across the mesh"})
		if err == nil {
			c.Engine().SendWithSender(c.Sender(), env, c.PID()) // the edge refuses a message with no sender
		}
	}, "tool-server")
	t.Cleanup(func() { <-e.c.engine.Poison(server).Done() })
	outputs := make(chan string, 2)
	e.model.SetResponder(func(req *demomodel.Request) demomodel.Script {
		if out, ok := req.ToolOutput("call_x"); ok {
			outputs <- out
			return demomodel.Text("done")
		}
		return demomodel.Respond(demomodel.FunctionCall("call_x", "lookup", `{"word":"mesh"}`))
	})
	r := e.round(messages.StartRound{User: "alice", Thread: "tools/1", Text: "look it up",
		Tools: []messages.DynamicTool{{Name: "lookup", Description: "looks a word up", InputSchema: `{"type":"object"}`,
			Server: &messages.PID{Address: server.Address, ID: server.ID}}}}).mustComplete(t)
	select {
	case req := <-got:
		if req.User != "alice" || req.Tool != "lookup" || !strings.Contains(req.Arguments, "mesh") {
			t.Errorf("the tool server got %+v", req)
		}
	case <-time.After(opsWait):
		t.Fatal("no ToolCallRequest reached the caller's engine")
	}
	select {
	case out := <-outputs:
		if out != "served across the mesh" {
			t.Errorf("the model read %q", out)
		}
	case <-time.After(opsWait):
		t.Fatalf("the model never read the tool's output; round %v", r)
	}
}
