package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// TestAskApprovals: with on_request ask, the real CLI's command approvals
// (approval policy untrusted) go to the caller as request events with a
// deadline: the one answered accept runs; the one left alone is declined
// at its deadline, and a request_closed event says so.
func TestAskApprovals(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) {
		c.ApprovalPolicy = "untrusted"
		c.Sandbox = "workspace-write"
	})
	e.model.Enqueue(
		demomodel.Respond(demomodel.ExecCommand("call-yes", "touch yes.txt")),
		demomodel.Respond(demomodel.ExecCommand("call-late", "touch late.txt")),
		demomodel.Text("ok"))
	id := e.startRound(messages.StartRound{User: "asker", Thread: "ask/1", Text: "touch both",
		OnRequest: messages.PolicyAsk, AskTimeoutMS: 2000})
	asked := e.waitEvent(id, "a request for call-yes", func(ev messages.RoundEvent) bool {
		return ev.Kind == messages.KindRequest && ev.Request.ItemID == "call-yes"
	})
	if asked.Request.Type != messages.RequestCommandApproval || asked.Request.Command == "" || asked.Request.DeadlineUnixMilli == 0 {
		t.Errorf("request event %+v", asked.Request)
	}
	e.send(messages.AnswerRequest{User: "asker", RoundID: id, RequestID: asked.Request.RequestID, Decision: messages.DecisionAccept})
	if rc := e.awaitOther("the answer's RoundControlled", func(m any) bool { _, ok := m.(messages.RoundControlled); return ok }).(messages.RoundControlled); !rc.OK {
		t.Errorf("answer: %+v", rc)
	}
	r := e.await(id).mustComplete(t)
	var outcomes []string
	for _, ev := range r.kind(messages.KindRequestClosed) {
		outcomes = append(outcomes, ev.Request.Outcome)
	}
	if len(outcomes) != 2 || outcomes[0] != "answered: accept" || outcomes[1] != "expired: declined" {
		t.Errorf("request outcomes %q, want answered: accept, then expired: declined", outcomes)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "yes.txt")); err != nil {
		t.Errorf("the accepted command did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "late.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the expired request's command ran: %v", err)
	}
}

// TestAskChildAgentApproval: a child agent (codex's collab spawn_agent,
// driven by the mock model) asks an approval in its own thread; it
// follows its round's policy: the request reaches the round's caller,
// naming the child's thread, and the accepted command runs.
func TestAskChildAgentApproval(t *testing.T) {
	e := newEnv(t, func(c *daemonSetup) {
		c.ApprovalPolicy = "untrusted"
		c.Sandbox = "workspace-write"
	})
	collab := func(id, tool, args string) demomodel.Script {
		return demomodel.Respond(demomodel.FunctionCall(id, tool, args).WithNamespace("multi_agent_v1"))
	}
	e.model.SetResponder(func(req *demomodel.Request) demomodel.Script {
		body := string(req.Body)
		switch {
		case strings.Contains(req.LastUserText(), "CHILD TASK") && !strings.Contains(body, "call-child"):
			return demomodel.Respond(demomodel.ExecCommand("call-child", "touch child.txt"))
		case strings.Contains(body, "call-child"):
			return demomodel.Text("child done")
		case strings.Contains(body, "call-wait"):
			return demomodel.Text("parent done")
		case strings.Contains(body, "call-spawn"):
			out, _ := req.ToolOutput("call-spawn")
			var o struct {
				AgentID string `json:"agent_id"`
			}
			_ = json.Unmarshal([]byte(out), &o)
			return collab("call-wait", "wait_agent", `{"targets":["`+o.AgentID+`"],"timeout_ms":60000}`)
		}
		return collab("call-spawn", "spawn_agent", `{"message":"CHILD TASK: touch child.txt"}`)
	})
	id := e.startRound(messages.StartRound{User: "parent", Thread: "ask/child", Text: "spawn a child",
		OnRequest: messages.PolicyAsk, AskTimeoutMS: 30000})
	asked := e.waitEvent(id, "the child's request", func(ev messages.RoundEvent) bool { return ev.Kind == messages.KindRequest })
	if asked.Request.ItemID != "call-child" || asked.Request.ChildThreadID == "" {
		t.Errorf("the child's request %+v: want call-child with the child's thread", asked.Request)
	}
	e.send(messages.AnswerRequest{User: "parent", RoundID: id, RequestID: asked.Request.RequestID, Decision: messages.DecisionAccept})
	r := e.await(id).mustComplete(t)
	if r.verdict.CodexThreadID == asked.Request.ChildThreadID {
		t.Errorf("the child's thread is the round's own")
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "child.txt")); err != nil {
		t.Errorf("the child's accepted command did not run: %v", err)
	}
}
