package actors

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/third_party/hollywood/actor"
)

// toolServer is a mesh actor serving a round's dynamic tool: serve
// decides each call's answer (nil: never answers).
type toolServer struct {
	pid   *actor.PID
	mu    sync.Mutex
	calls []messages.ToolCallRequest
}

func (h *harness) toolServer(serve func(messages.ToolCallRequest) []messages.ToolCallResult) *toolServer {
	ts := &toolServer{}
	ts.pid = h.engine.SpawnFunc(func(c *actor.Context) {
		u, err := messages.Unwrap(c.Message())
		if err != nil {
			return
		}
		req, ok := u.(messages.ToolCallRequest)
		if !ok {
			return
		}
		ts.mu.Lock()
		ts.calls = append(ts.calls, req)
		ts.mu.Unlock()
		for _, res := range serve(req) {
			c.Engine().Send(c.Sender(), res)
		}
	}, "tool-server")
	h.t.Cleanup(func() { <-h.engine.Poison(ts.pid).Done() })
	return ts
}

func (ts *toolServer) seen() []messages.ToolCallRequest {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]messages.ToolCallRequest(nil), ts.calls...)
}

// lookupTool is the tool the tests declare, served by server.
func lookupTool(server *actor.PID) []messages.DynamicTool {
	return []messages.DynamicTool{{Name: "lookup", Description: "looks a word up in the mesh",
		InputSchema: `{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`,
		Server:      &messages.PID{Address: server.Address, ID: server.ID}}}
}

// toolModel calls lookup once it is offered, then answers with what the
// tool gave it.
func toolModel(outputs chan<- string) demomodel.Responder {
	return func(req *demomodel.Request) demomodel.Script {
		if out, ok := req.ToolOutput("call_lookup"); ok {
			outputs <- out
			return demomodel.Text("the mesh says: " + out)
		}
		if !req.HasTool("lookup") {
			return demomodel.Text("no tool")
		}
		return demomodel.Respond(demomodel.FunctionCall("call_lookup", "lookup", `{"word":"ember"}`))
	}
}

// A round declares a tool served by a mesh actor: the real CLI offers it
// to the model, the model's call reaches the actor with its arguments,
// the actor's answer is what the model reads, the round completes. The
// actor answering twice changes nothing, and a result for a request it
// never got is dropped. The bystander, bob, runs a round without tools:
// the model is not offered one.
func TestDynamicToolServedByAMeshActor(t *testing.T) {
	h := newHarness(t, nil)
	outputs := make(chan string, 4)
	h.model.SetResponder(toolModel(outputs))
	ts := h.toolServer(func(req messages.ToolCallRequest) []messages.ToolCallResult {
		res := messages.ToolCallResult{User: req.User, RoundID: req.RoundID, RequestID: req.RequestID, Success: true,
			Text: "ember: a glowing coal (args " + req.Arguments + ")"}
		twice := res
		twice.Text = "a second answer"
		forged := res
		forged.RequestID = "t-guessed"
		return []messages.ToolCallResult{res, twice, forged}
	})
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "look up ember", RoundID: "a1", Tools: lookupTool(ts.pid)})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s %s", res.verdict.Status, res.verdict.Error)
	}
	select {
	case out := <-outputs:
		if !strings.Contains(out, "ember: a glowing coal") || !strings.Contains(out, `"word":"ember"`) || strings.Contains(out, "second") {
			t.Errorf("the model read %q", out)
		}
	case <-time.After(time.Second):
		t.Fatal("the model never got the tool's output")
	}
	calls := ts.seen()
	if len(calls) != 1 || calls[0].Tool != "lookup" || calls[0].User != "alice" || calls[0].RoundID != "a1" || !strings.HasPrefix(calls[0].RequestID, "t-") {
		t.Fatalf("calls %+v", calls)
	}
	bob := h.round(c, messages.StartRound{User: "bob", Thread: "t1", Text: "hi", RoundID: "b1"})
	if bob.verdict.Status != messages.StatusCompleted || bob.text() != "no tool" {
		t.Errorf("the bystander's round: %s %q", bob.verdict.Status, bob.text())
	}
}

// A tool server that never answers: past ToolTimeout the model reads a
// tool error naming the tool, and the round completes.
func TestDynamicToolServerSilent(t *testing.T) {
	h := newHarness(t, func(c *tree) { c.ToolTimeout = 300 * time.Millisecond })
	outputs := make(chan string, 4)
	h.model.SetResponder(toolModel(outputs))
	ts := h.toolServer(func(messages.ToolCallRequest) []messages.ToolCallResult { return nil })
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "look up ember", RoundID: "a1", Tools: lookupTool(ts.pid)})
	if res.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s %s", res.verdict.Status, res.verdict.Error)
	}
	select {
	case out := <-outputs:
		if !strings.Contains(out, `"lookup" did not answer within 300ms`) {
			t.Errorf("the model read %q, want the deadline's tool error", out)
		}
	case <-time.After(time.Second):
		t.Fatal("the model never got the tool's error")
	}
}
