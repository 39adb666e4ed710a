package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshweaver/supervisor/actors"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/mockmodel"
)

// TestAskApprovals: with on_request ask, the real CLI's command approvals
// (approval policy untrusted) go to the caller as request events with a
// deadline: the one answered accept runs; the one left alone is declined
// at its deadline, and a request_closed event says so.
func TestAskApprovals(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) {
		c.ApprovalPolicy = "untrusted"
		c.Sandbox = "workspace-write"
	})
	e.model.Enqueue(
		mockmodel.Respond(mockmodel.ExecCommand("call-yes", "touch yes.txt")),
		mockmodel.Respond(mockmodel.ExecCommand("call-late", "touch late.txt")),
		mockmodel.Text("ok"))
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
