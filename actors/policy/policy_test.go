package policy

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/jsoneq"
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
		if got := Effective(tt.p, tt.auto); got != tt.want {
			t.Errorf("Effective(%q, %v) = %q, want %q", tt.p, tt.auto, got, tt.want)
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
			shown, ok := Describe(tt.r, Bounds{})
			if ok != tt.wantShow || shown.Type != tt.shown {
				t.Fatalf("Describe = %+v, %v; want type %q, %v", shown, ok, tt.shown, tt.wantShow)
			}
			res, _, err := CallerAnswer(tt.r, tt.answer, Bounds{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("CallerAnswer error = %v, want error %v", err, tt.wantErr)
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
	if s, _ := Describe(cmd, Bounds{}); s.Command != "ls" || s.Cwd != "/w" || s.Reason != "why" || s.ItemID != "i1" {
		t.Errorf("command shown as %+v", s)
	}
	if s, _ := Describe(input, Bounds{}); len(s.Questions) != 1 || s.Questions[0].Options[1] != "sqlite" {
		t.Errorf("questions shown as %+v", s.Questions)
	}
	if s, _ := Describe(elicit, Bounds{}); s.Schema == "" || s.Message != "Colour?" {
		t.Errorf("elicitation shown as %+v", s)
	}
}

func TestPolicy(t *testing.T) {
	req := func(method, params string) *codexrpc.Request {
		return &codexrpc.Request{ID: json.RawMessage("0"), Method: method, Params: json.RawMessage(params)}
	}
	tests := []struct {
		name     string
		req      *codexrpc.Request
		auto     bool
		want     string // JSON of the result, or "error <code>"
		question string
	}{
		{"command approval, auto", req(codexproto.ReqCommandApproval, `{}`), true, `{"decision":"accept"}`, ""},
		{"command approval, not auto", req(codexproto.ReqCommandApproval, `{}`), false, `{"decision":"decline"}`, ""},
		{"patch approval, auto", req(codexproto.ReqFileChangeApproval, `{}`), true, `{"decision":"accept"}`, ""},
		{"patch approval, not auto", req(codexproto.ReqFileChangeApproval, `{}`), false, `{"decision":"decline"}`, ""},
		{"elicitation declined even with auto", req(codexproto.ReqElicitation, `{}`), true, `{"action":"decline"}`, ""},
		{"mcp tool approval accepted with auto", req(codexproto.ReqElicitation, `{"_meta":{"codex_approval_kind":"mcp_tool_call"}}`), true, `{"action":"accept","content":{}}`, ""},
		{"mcp tool approval declined without auto", req(codexproto.ReqElicitation, `{"_meta":{"codex_approval_kind":"mcp_tool_call"}}`), false, `{"action":"decline"}`, ""},
		{"user input: blank answers, question surfaced",
			req(codexproto.ReqUserInput, `{"questions":[{"id":"db","header":"Database","question":"Which database?","options":[{"label":"Postgres"},{"label":"SQLite"}]}]}`),
			false, `{"answers":{"db":{"answers":[]}}}`, "Codex asks: Which database? (Postgres / SQLite)"},
		{"unknown request", req("item/tool/call", `{}`), true, "error -32601", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, q, err := Answer(tt.req, tt.auto, Bounds{})
			got := jsoneq.String(res)
			if err != nil {
				var we *codexrpc.WireError
				if !asWire(err, &we) {
					t.Fatalf("error %v is not a WireError", err)
				}
				got = "error " + itoa(we.Code)
			}
			if got != tt.want {
				t.Errorf("answer = %s, want %s", got, tt.want)
			}
			if q != tt.question {
				t.Errorf("question = %q, want %q", q, tt.question)
			}
		})
	}
}
