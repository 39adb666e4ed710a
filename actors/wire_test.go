package actors

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/fakeappserver"
)

// turnStarts returns the params of every turn/start the fake received.
func turnStarts(t *testing.T, record string) []map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]json.RawMessage
	for _, line := range strings.Split(string(data), "\n") {
		var m struct {
			Method string                     `json:"method"`
			Params map[string]json.RawMessage `json:"params"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Method == "turn/start" {
			out = append(out, m.Params)
		}
	}
	return out
}

// A round with an output schema sends it with turn/start, and its verdict
// carries the final answer as structured output, with the model used.
func TestWireOutputSchemaStructuredOutput(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := fakeHarness(t, fakeappserver.Config{ReplyText: `{"answer": 42}`, RecordPath: record}, nil)
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "carol", Thread: "t-schema", Text: "answer",
		OutputSchema: `{"type":"object","properties":{"answer":{"type":"integer"}}}`})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v", r.verdict)
	}
	if r.verdict.StructuredOutput != `{"answer":42}` {
		t.Errorf("structured output = %q", r.verdict.StructuredOutput)
	}
	if r.verdict.Model == "" {
		t.Errorf("the verdict names no model: %+v", r.verdict)
	}
	ts := turnStarts(t, record)
	if len(ts) != 1 || !strings.Contains(string(ts[0]["outputSchema"]), `"answer"`) {
		t.Fatalf("turn/start params = %v", ts)
	}
}

// An image path that is not in the workspace ends the round rejected,
// before any turn is started.
func TestWireBadImagePathRejected(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "seen", RecordPath: record}, nil)
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "carol", Thread: "t-img", Text: "look",
		Images: []messages.ImageInput{{Path: "no-such-image.png"}}})
	if r.verdict.Status != messages.StatusRejected || !strings.Contains(r.verdict.Error, "image 0") {
		t.Fatalf("verdict = %+v", r.verdict)
	}
	if ts := turnStarts(t, record); len(ts) != 0 {
		t.Errorf("a turn was started: %v", ts)
	}
}

// A round asking for a sandbox above the operator's bound runs within it
// and is told so in a notice.
func TestWireSandboxClampedWithNotice(t *testing.T) {
	record := filepath.Join(t.TempDir(), "received.jsonl")
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "ok", RecordPath: record}, func(c *tree) {
		c.MaxSandbox = messages.SandboxWorkspaceWrite
	})
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "carol", Thread: "t-sbx", Text: "go",
		Sandbox: messages.SandboxDangerFullAccess})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v", r.verdict)
	}
	var noticed bool
	for _, e := range r.kinds(messages.KindNotice) {
		noticed = noticed || strings.Contains(e.Text, "runs with "+messages.SandboxWorkspaceWrite)
	}
	if !noticed {
		t.Errorf("no clamp notice in %+v", r.events)
	}
	ts := turnStarts(t, record)
	if len(ts) != 1 || !strings.Contains(string(ts[0]["sandboxPolicy"]), `"workspaceWrite"`) {
		t.Fatalf("turn/start params = %v", ts)
	}
}

// A round that would answer approvals (auto_approve, or on_request ask)
// under approval policy never, where codex asks for none, is told so in a
// notice naming the policy that would ask; a round whose settings agree
// gets no such notice.
func TestWireSilentApprovalsNoticed(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "ok"}, func(c *tree) {
		c.ApprovalPolicy = messages.ApprovalNever
		c.ApprovalPolicies = []string{messages.ApprovalNever, messages.ApprovalOnRequest}
	})
	c := h.caller()
	for i, tc := range []struct {
		req  messages.StartRound
		want string // "" for no notice
	}{
		{messages.StartRound{AutoApprove: true}, "auto_approve approves nothing"},
		{messages.StartRound{OnRequest: messages.PolicyAsk}, "no approval will be put to you"},
		{messages.StartRound{AutoApprove: true, ApprovalPolicy: messages.ApprovalOnRequest}, ""},
		{messages.StartRound{}, ""},
	} {
		tc.req.User, tc.req.Thread, tc.req.Text = "carol", fmt.Sprintf("t-appr-%d", i), "go"
		r := h.round(c, tc.req)
		if r.verdict.Status != messages.StatusCompleted {
			t.Fatalf("round %d: verdict = %+v", i, r.verdict)
		}
		var got []string
		for _, e := range r.kinds(messages.KindNotice) {
			if strings.Contains(e.Text, "approval policy never") {
				got = append(got, e.Text)
			}
		}
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("round %d (%+v): unexpected notice %q", i, tc.req, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], "ask for approval policy on-request")):
			t.Errorf("round %d: notices %q, want one with %q naming on-request", i, got, tc.want)
		}
	}
}

// A subagent's events reach the round that spawned it, attributed to the
// child's thread: the router learns the child from the parent's collab
// item before the child's own notifications arrive.
func TestWireChildAgentEventsReachRound(t *testing.T) {
	h := fakeHarness(t, fakeappserver.Config{ReplyText: "parent done", TurnNotifications: []fakeappserver.NotificationSpec{
		{Method: "item/started", Params: json.RawMessage(`{"threadId":"${threadId}","turnId":"${turnId}","item":{"type":"collabAgentToolCall","id":"call-1","tool":"spawnAgent","status":"inProgress","senderThreadId":"${threadId}","receiverThreadIds":["child-1"],"agentsStates":{}}}`)},
		{Method: "turn/started", Params: json.RawMessage(`{"threadId":"child-1","turn":{"id":"child-turn","items":[],"status":"inProgress"}}`)},
		{Method: "item/completed", Params: json.RawMessage(`{"threadId":"child-1","turnId":"child-turn","item":{"type":"agentMessage","id":"child-msg","text":"child says hi"}}`)},
		{Method: "turn/completed", Params: json.RawMessage(`{"threadId":"child-1","turn":{"id":"child-turn","items":[],"status":"completed"}}`)},
	}}, nil)
	c := h.caller()
	r := h.round(c, messages.StartRound{User: "carol", Thread: "t-kid", Text: "delegate"})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict = %+v", r.verdict)
	}
	var childText, ended bool
	for _, e := range r.events {
		if e.AgentThread == "child-1" && e.Kind == messages.KindText && strings.Contains(e.Text, "child says hi") {
			childText = true
		}
		if e.Kind == messages.KindSubagent && e.Subagent.Phase == messages.SubagentEnded && e.Subagent.Thread == "child-1" {
			ended = true
		}
	}
	if !childText || !ended {
		t.Errorf("child text %v, child ended %v; events %+v", childText, ended, r.events)
	}
	if got := r.text(); !strings.Contains(got, "parent done") || strings.Contains(strings.ReplaceAll(got, "child says hi", ""), "child") {
		t.Errorf("round text = %q", got)
	}
}

// A command that changes a thread is refused while a round runs on it; a
// read of a mesh thread with no codex thread says so. Both answer once.
func TestWireThreadOpsRefusedOrUnknown(t *testing.T) {
	h := newHarness(t, heldFake(t, fakeappserver.Config{ReplyText: "held"}))
	c, other := h.caller(), h.caller()
	m := messages.StartRound{User: "ivy", Thread: "mesh/busy", Text: "hold", RoundID: newRoundID()}
	h.roundAsync(c, m)
	c.waitFirstEvent(t, m.RoundID, 90*time.Second)

	h.engine.SendWithSender(h.root, messages.ArchiveThread{User: "ivy", Thread: "mesh/busy"}, other.pid)
	if a := expect[messages.ThreadArchived](t, other); a.OK || !strings.Contains(a.Error, "a round runs") {
		t.Errorf("archive during a round = %+v", a)
	}
	h.engine.SendWithSender(h.root, messages.CompactThread{User: "ivy", Thread: "mesh/busy"}, other.pid)
	if a := expect[messages.ThreadCompacted](t, other); a.OK || !strings.Contains(a.Error, "a round runs") {
		t.Errorf("compact during a round = %+v", a)
	}
	h.engine.SendWithSender(h.root, messages.ReadThread{User: "ivy", Thread: "mesh/never"}, other.pid)
	if r := expect[messages.ThreadTurns](t, other); r.Error == "" || len(r.Turns) != 0 {
		t.Errorf("read of an unknown thread = %+v", r)
	}
	h.engine.SendWithSender(h.root, messages.ForkThread{User: "ivy", Thread: "mesh/never", NewThread: "mesh/new"}, other.pid)
	if f := expect[messages.ThreadForked](t, other); f.Error == "" || f.CodexThreadID != "" {
		t.Errorf("fork of an unknown thread = %+v", f)
	}
	other.quiet(t)

	h.engine.SendWithSender(h.root, messages.InterruptRound{User: "ivy", Thread: "mesh/busy", RoundID: m.RoundID}, c.pid)
	if r := c.collectAll(t, m.RoundID, 90*time.Second); r.verdict.Status != messages.StatusInterrupted {
		t.Errorf("verdict = %+v", r.verdict)
	}
}
