package actors

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
)

func TestEffectivePolicy(t *testing.T) {
	for _, tt := range []struct {
		p    messages.RequestPolicy
		auto bool
		want messages.RequestPolicy
	}{
		{"", false, messages.PolicyDecline},
		{"", true, messages.PolicyAuto},
		{messages.PolicyDecline, true, messages.PolicyDecline},
		{messages.PolicyAsk, false, messages.PolicyAsk},
		{messages.PolicyAuto, false, messages.PolicyAuto},
	} {
		if got := effectivePolicy(tt.p, tt.auto); got != tt.want {
			t.Errorf("effectivePolicy(%q, %v) = %q, want %q", tt.p, tt.auto, got, tt.want)
		}
	}
}

func TestDescribeAndAnswer(t *testing.T) {
	req := func(method, params string) *codexrpc.Request {
		return &codexrpc.Request{Method: method, Params: json.RawMessage(params)}
	}
	cmd := req(codexproto.ReqCommandApproval, `{"threadId":"t","itemId":"i1","command":"ls","cwd":"/w","reason":"why"}`)
	patch := req(codexproto.ReqFileChangeApproval, `{"threadId":"t","itemId":"i2"}`)
	input := req(codexproto.ReqUserInput, `{"threadId":"t","itemId":"i3","questions":[{"id":"db","header":"H","question":"Which?","options":[{"label":"pg"},{"label":"sqlite"}]}]}`)
	mcpTool := req(codexproto.ReqElicitation, `{"threadId":"t","message":"Allow echo?","_meta":{"codex_approval_kind":"mcp_tool_call"},"requestedSchema":{"type":"object"}}`)
	elicit := req(codexproto.ReqElicitation, `{"threadId":"t","message":"Colour?","_meta":null,"requestedSchema":{"type":"object","properties":{"c":{"type":"string"}}}}`)
	other := req("item/future/request", `{}`)

	tests := []struct {
		name     string
		r        *codexrpc.Request
		shown    messages.RequestType
		answer   messages.AnswerRequest
		want     string // the JSON codex gets
		wantErr  bool
		wantShow bool
	}{
		{"command accept", cmd, messages.RequestCommandApproval, messages.AnswerRequest{Decision: "accept"}, `{"decision":"accept"}`, false, true},
		{"command session", cmd, messages.RequestCommandApproval, messages.AnswerRequest{Decision: "accept_for_session"}, `{"decision":"acceptForSession"}`, false, true},
		{"command cancel", cmd, messages.RequestCommandApproval, messages.AnswerRequest{Decision: "cancel"}, `{"decision":"cancel"}`, false, true},
		{"command no decision", cmd, messages.RequestCommandApproval, messages.AnswerRequest{}, "", true, true},
		{"patch decline", patch, messages.RequestFileChangeApproval, messages.AnswerRequest{Decision: "decline"}, `{"decision":"decline"}`, false, true},
		{"input answered", input, messages.RequestUserInput, messages.AnswerRequest{Answers: map[string][]string{"db": {"pg"}}}, `{"answers":{"db":{"answers":["pg"]}}}`, false, true},
		{"input declined", input, messages.RequestUserInput, messages.AnswerRequest{Decision: "decline", Answers: map[string][]string{"db": {"pg"}}}, `{"answers":{"db":{"answers":[]}}}`, false, true},
		{"input unknown id", input, messages.RequestUserInput, messages.AnswerRequest{Answers: map[string][]string{"x": {"pg"}}}, "", true, true},
		{"mcp tool accept", mcpTool, messages.RequestMCPToolApproval, messages.AnswerRequest{Decision: "accept"}, `{"action":"accept","content":{}}`, false, true},
		{"elicitation content", elicit, messages.RequestElicitation, messages.AnswerRequest{Decision: "accept", Content: `{"c":"blue"}`}, `{"action":"accept","content":{"c":"blue"}}`, false, true},
		{"elicitation bad content", elicit, messages.RequestElicitation, messages.AnswerRequest{Decision: "accept", Content: `[1]`}, "", true, true},
		{"elicitation decline", elicit, messages.RequestElicitation, messages.AnswerRequest{Decision: "decline"}, `{"action":"decline"}`, false, true},
		{"unknown method", other, "", messages.AnswerRequest{Decision: "accept"}, "", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shown, ok := describeRequest(tt.r)
			if ok != tt.wantShow || shown.Type != tt.shown {
				t.Fatalf("describeRequest = %+v, %v; want type %q, %v", shown, ok, tt.shown, tt.wantShow)
			}
			res, _, err := callerAnswer(tt.r, tt.answer)
			if (err != nil) != tt.wantErr {
				t.Fatalf("callerAnswer error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got, _ := json.Marshal(res)
			if string(got) != tt.want {
				t.Errorf("codex gets %s, want %s", got, tt.want)
			}
		})
	}
	if s, _ := describeRequest(cmd); s.Command != "ls" || s.Cwd != "/w" || s.Reason != "why" || s.ItemID != "i1" {
		t.Errorf("command shown as %+v", s)
	}
	if s, _ := describeRequest(input); len(s.Questions) != 1 || s.Questions[0].Options[1] != "sqlite" {
		t.Errorf("questions shown as %+v", s.Questions)
	}
	if s, _ := describeRequest(elicit); s.Schema == "" || s.Message != "Colour?" {
		t.Errorf("elicitation shown as %+v", s)
	}
}

func TestChildThreads(t *testing.T) {
	var ct childThreads
	ct.limit = 2
	note := func(id, parent string) {
		p := `null`
		if parent != "" {
			p = `"` + parent + `"`
		}
		ct.note(&codexrpc.Notification{Method: "thread/started", Params: json.RawMessage(`{"thread":{"id":"` + id + `","parentThreadId":` + p + `}}`)})
	}
	note("root", "")
	note("kid", "root")
	note("grandkid", "kid")
	if got := ct.root("grandkid"); got != "root" {
		t.Errorf("root(grandkid) = %q, want root", got)
	}
	if got := ct.root("stranger"); got != "stranger" {
		t.Errorf("root(stranger) = %q", got)
	}
	note("a", "x")
	if got := ct.root("kid"); got != "kid" {
		t.Errorf("the oldest child was not forgotten past the limit: root(kid) = %q", got)
	}
	ct.note(&codexrpc.Notification{Method: "item/started", Params: json.RawMessage(`{"thread":{"id":"b","parentThreadId":"a"}}`)})
	if got := ct.root("b"); got != "b" {
		t.Errorf("a notification other than thread/started made a child: %q", got)
	}
	// codex 0.169.0: the parent's collab tool call names the children.
	ct = childThreads{}
	ct.note(&codexrpc.Notification{Method: "item/completed", Params: json.RawMessage(
		`{"item":{"type":"collabAgentToolCall","tool":"spawnAgent","senderThreadId":"p","receiverThreadIds":["c1","c2"]},"threadId":"p"}`)})
	ct.note(&codexrpc.Notification{Method: "item/completed", Params: json.RawMessage(
		`{"item":{"type":"commandExecution","senderThreadId":"p","receiverThreadIds":["x"]},"threadId":"p"}`)})
	if ct.root("c1") != "p" || ct.root("c2") != "p" || ct.root("x") != "x" {
		t.Errorf("from a collab item: c1→%q c2→%q x→%q; want p, p, x", ct.root("c1"), ct.root("c2"), ct.root("x"))
	}
}
