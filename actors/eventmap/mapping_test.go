package eventmap

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/jsoneq"
)

func note(method, params string) *codexrpc.Notification {
	return &codexrpc.Notification{Method: method, Params: json.RawMessage(params)}
}

// One row per row of the seed's table: what each app-server message becomes.
func TestMapperRows(t *testing.T) {
	intp := func(i int) *int { return &i }
	tests := []struct {
		name  string
		prior []*codexrpc.Notification // fed first, results ignored
		in    *codexrpc.Notification
		want  []messages.RoundEvent
		end   *TurnEnd
	}{
		{name: "text delta",
			in:   note("item/agentMessage/delta", `{"threadId":"t","turnId":"u","itemId":"msg-1","delta":"Hel"}`),
			want: []messages.RoundEvent{{Kind: messages.KindText, Text: "Hel", ItemID: "msg-1"}}},
		{name: "completed message after deltas is not repeated",
			prior: []*codexrpc.Notification{note("item/agentMessage/delta", `{"itemId":"msg-1","delta":"Hello"}`)},
			in:    note("item/completed", `{"item":{"type":"agentMessage","id":"msg-1","text":"Hello"}}`)},
		{name: "completed message without deltas",
			in:   note("item/completed", `{"item":{"type":"agentMessage","id":"msg-2","text":"Whole"}}`),
			want: []messages.RoundEvent{{Kind: messages.KindText, Text: "Whole", ItemID: "msg-2"}}},
		{name: "reasoning summary delta",
			in:   note("item/reasoning/summaryTextDelta", `{"itemId":"rs-1","delta":"Think","summaryIndex":0}`),
			want: []messages.RoundEvent{{Kind: messages.KindReasoning, Text: "Think", ItemID: "rs-1"}}},
		{name: "raw reasoning delta",
			in:   note("item/reasoning/textDelta", `{"itemId":"rs-1","delta":"raw","contentIndex":0}`),
			want: []messages.RoundEvent{{Kind: messages.KindReasoning, Text: "raw", ItemID: "rs-1"}}},
		{name: "completed reasoning after deltas is not repeated",
			prior: []*codexrpc.Notification{note("item/reasoning/summaryTextDelta", `{"itemId":"rs-1","delta":"x"}`)},
			in:    note("item/completed", `{"item":{"type":"reasoning","id":"rs-1","summary":["x"],"content":[]}}`)},
		{name: "completed reasoning without deltas",
			in:   note("item/completed", `{"item":{"type":"reasoning","id":"rs-2","summary":["a","b"],"content":["raw"]}}`),
			want: []messages.RoundEvent{{Kind: messages.KindReasoning, Text: "a\n\nb", ItemID: "rs-2"}}},
		{name: "command started",
			in: note("item/started", `{"item":{"type":"commandExecution","id":"call-1","command":"/bin/bash -lc 'ls'","cwd":"/w","status":"inProgress"}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolCall, ItemID: "call-1", Tool: &messages.ToolCall{
				CallID: "call-1", Name: "shell", Args: `{"command":"/bin/bash -lc 'ls'"}`, Cwd: "/w"}}}},
		{name: "command failed with exit code",
			in: note("item/completed", `{"item":{"type":"commandExecution","id":"call-1","command":"x","cwd":"/w","status":"failed","exitCode":3,"aggregatedOutput":"boom"}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolResult, ItemID: "call-1", Result: &messages.ToolResult{
				CallID: "call-1", Name: "shell", Output: "boom", ExitCode: intp(3), Failed: true, Fault: "exit code 3"}}}},
		{name: "command declined",
			in: note("item/completed", `{"item":{"type":"commandExecution","id":"call-2","command":"x","cwd":"/w","status":"declined"}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolResult, ItemID: "call-2", Result: &messages.ToolResult{
				CallID: "call-2", Name: "shell", Failed: true, Fault: "declined"}}}},
		{name: "command completed",
			in: note("item/completed", `{"item":{"type":"commandExecution","id":"call-3","command":"x","cwd":"/w","status":"completed","exitCode":0,"aggregatedOutput":"hi\n"}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolResult, ItemID: "call-3", Result: &messages.ToolResult{
				CallID: "call-3", Name: "shell", Output: "hi\n", ExitCode: intp(0)}}}},
		{name: "mcp call started",
			in: note("item/started", `{"item":{"type":"mcpToolCall","id":"c","server":"meshweaver","tool":"echo","status":"inProgress","arguments":{"text":"hi"}}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolCall, ItemID: "c", Tool: &messages.ToolCall{
				CallID: "c", Name: "mcp__meshweaver__echo", Args: `{"text":"hi"}`}}}},
		{name: "mcp call result",
			in: note("item/completed", `{"item":{"type":"mcpToolCall","id":"c","server":"meshweaver","tool":"echo","status":"completed","arguments":{},"result":{"content":[{"type":"text","text":"hi back"}]}}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolResult, ItemID: "c", Result: &messages.ToolResult{
				CallID: "c", Name: "mcp__meshweaver__echo", Output: "hi back"}}}},
		{name: "mcp call error is the fault",
			in: note("item/completed", `{"item":{"type":"mcpToolCall","id":"c","server":"meshweaver","tool":"echo","status":"failed","arguments":{},"error":{"message":"user rejected MCP tool call"}}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolResult, ItemID: "c", Result: &messages.ToolResult{
				CallID: "c", Name: "mcp__meshweaver__echo", Failed: true, Fault: "user rejected MCP tool call"}}}},
		{name: "file change",
			in: note("item/started", `{"item":{"type":"fileChange","id":"p","status":"inProgress","changes":[{"path":"/w/a","kind":{"type":"update","move_path":null},"diff":""},{"path":"/w/b","kind":{"type":"add"},"diff":""}]}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolCall, ItemID: "p", Tool: &messages.ToolCall{
				CallID: "p", Name: "apply_patch", Paths: []messages.FileChange{{Path: "/w/a", Kind: "update"}, {Path: "/w/b", Kind: "add"}}}}}},
		{name: "web search",
			in: note("item/started", `{"item":{"type":"webSearch","id":"w","query":"go actors"}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolCall, ItemID: "w", Tool: &messages.ToolCall{
				CallID: "w", Name: "web_search", Args: `{"query":"go actors"}`}}}},
		{name: "dynamic tool by its own name",
			in: note("item/started", `{"item":{"type":"dynamicToolCall","id":"d","tool":"lookup","status":"inProgress","arguments":{"q":1}}}`),
			want: []messages.RoundEvent{{Kind: messages.KindToolCall, ItemID: "d", Tool: &messages.ToolCall{
				CallID: "d", Name: "lookup", Args: `{"q":1}`}}}},
		{name: "usage of an earlier turn (re-sent on resume) is not this round's",
			prior: []*codexrpc.Notification{note("turn/started", `{"threadId":"t","turn":{"id":"u2","status":"inProgress"}}`)},
			in:    note("thread/tokenUsage/updated", `{"turnId":"u1","tokenUsage":{"total":{"totalTokens":1},"last":{"totalTokens":1}}}`)},
		{name: "usage before the turn started is not this round's",
			in: note("thread/tokenUsage/updated", `{"turnId":"u1","tokenUsage":{"total":{"totalTokens":1},"last":{"totalTokens":1}}}`)},
		{name: "usage of the last request, not the thread total",
			prior: []*codexrpc.Notification{note("turn/started", `{"threadId":"t","turn":{"id":"u","status":"inProgress"}}`)},
			in:    note("thread/tokenUsage/updated", `{"turnId":"u","tokenUsage":{"total":{"totalTokens":262,"inputTokens":250,"cachedInputTokens":140,"outputTokens":12,"reasoningOutputTokens":3},"last":{"totalTokens":157,"inputTokens":150,"cachedInputTokens":100,"outputTokens":7,"reasoningOutputTokens":3}}}`),
			want: []messages.RoundEvent{{Kind: messages.KindUsage, Usage: &messages.Usage{
				InputTokens: 150, CachedInputTokens: 100, OutputTokens: 7, ReasoningOutputTokens: 3, TotalTokens: 157}}}},
		{name: "retried error is a retry event",
			in:   note("error", `{"error":{"message":"Reconnecting... 1/2"},"willRetry":true}`),
			want: []messages.RoundEvent{{Kind: messages.KindRetry, Text: "Reconnecting... 1/2", ErrorInfo: &messages.ErrorInfo{Class: messages.ErrorOther}}}},
		{name: "retried error names its cause",
			in: note("error", `{"error":{"message":"Reconnecting... 2/5","additionalDetails":"stream disconnected","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":429}}},"willRetry":true}`),
			want: []messages.RoundEvent{{Kind: messages.KindRetry, Text: "Reconnecting... 2/5: stream disconnected",
				ErrorInfo: &messages.ErrorInfo{Class: messages.ErrorOverloaded, HTTPStatus: 429, Code: "responseStreamDisconnected"}}}},
		{name: "final error",
			in: note("error", `{"error":{"message":"Quota exceeded.","codexErrorInfo":"usageLimitExceeded"},"willRetry":false}`),
			want: []messages.RoundEvent{{Kind: messages.KindError, Text: "Quota exceeded.",
				ErrorInfo: &messages.ErrorInfo{Class: messages.ErrorUsageLimit, Code: "usageLimitExceeded"}}}},
		{name: "model reroute",
			in: note("model/rerouted", `{"threadId":"t","turnId":"u","fromModel":"a","toModel":"b","reason":"highRiskCyberActivity"}`),
			want: []messages.RoundEvent{{Kind: messages.KindModelRerouted, Text: "model rerouted from a to b",
				Reroute: &messages.ModelReroute{From: "a", To: "b", Reason: "highRiskCyberActivity"}}}},
		{name: "mcp server failed to start",
			in:   note("mcpServer/startupStatus/updated", `{"threadId":"t","name":"meshweaver","status":"failed","error":"refused"}`),
			want: []messages.RoundEvent{{Kind: messages.KindNotice, Text: "MCP server meshweaver failed to start; the round runs without it: refused"}}},
		{name: "mcp server starting is nothing",
			in: note("mcpServer/startupStatus/updated", `{"threadId":"t","name":"meshweaver","status":"starting"}`)},
		{name: "turn completed",
			in:  note("turn/completed", `{"threadId":"t","turn":{"id":"u","status":"completed","error":null}}`),
			end: &TurnEnd{TurnID: "u", Status: "completed"}},
		{name: "turn failed with codexErrorInfo",
			in: note("turn/completed", `{"threadId":"t","turn":{"id":"u","status":"failed","error":{"message":"boom","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":401}}}}}`),
			end: &TurnEnd{TurnID: "u", Status: "failed", Error: "boom", CodexErrorInfo: `{"httpConnectionFailed":{"httpStatusCode":401}}`,
				ErrorInfo: &messages.ErrorInfo{Class: messages.ErrorUnauthorized, HTTPStatus: 401, Code: "httpConnectionFailed"}}},
		{name: "unknown notification", in: note("thread/goal/cleared", `{"threadId":"t"}`)},
		{name: "rate limits", in: note("account/rateLimits/updated", `{"rateLimits":{}}`)},
		{name: "garbage params", in: note("item/agentMessage/delta", `[1,2`)},
		{name: "null params", in: note("item/completed", `null`)},
		{name: "user message item", in: note("item/completed", `{"item":{"type":"userMessage","id":"x","content":[{"type":"text","text":"hi"}]}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMapper()
			for _, p := range tt.prior {
				m.note(p)
			}
			got, end := m.note(tt.in)
			if !jsoneq.Equal(got, tt.want) {
				t.Errorf("events:\n got %s\nwant %s", jsoneq.String(got), jsoneq.String(tt.want))
			}
			if !jsoneq.Equal(end, tt.end) {
				t.Errorf("end = %s, want %s", jsoneq.String(end), jsoneq.String(tt.end))
			}
		})
	}
}

func TestMapperAnswerForJournal(t *testing.T) {
	m := NewMapper()
	m.note(note("item/agentMessage/delta", `{"itemId":"a","delta":"Hello "}`))
	m.note(note("item/agentMessage/delta", `{"itemId":"a","delta":"world"}`))
	m.note(note("item/completed", `{"item":{"type":"agentMessage","id":"a","text":"Hello world"}}`))
	m.note(note("item/completed", `{"item":{"type":"agentMessage","id":"b","text":"!"}}`))
	if got, want := m.Answer(), "Hello world!"; got != want {
		t.Errorf("Answer() = %q, want %q", got, want)
	}
}

func TestIsProgress(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   *codexrpc.Notification
		want bool
	}{
		{"delta", note("item/agentMessage/delta", `{"threadId":"t","turnId":"u","itemId":"i","delta":"x"}`), true},
		{"final error", note("error", `{"error":{"message":"Quota exceeded."},"willRetry":false}`), true},
		{"retried error", note("error", `{"error":{"message":"Reconnecting... 1/5"},"willRetry":true}`), false},
		{"unreadable error", note("error", `[`), true},
		{"turn completed", note("turn/completed", `{"threadId":"t","turn":{"id":"u","status":"completed"}}`), true},
	} {
		if got := IsProgress(tt.in); got != tt.want {
			t.Errorf("%s: IsProgress = %v, want %v", tt.name, got, tt.want)
		}
	}
}
