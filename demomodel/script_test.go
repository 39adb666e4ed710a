package demomodel_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

func TestScriptStreams(t *testing.T) {
	t.Parallel()
	patch := "*** Begin Patch\n*** Add File: new.txt\n+x\n*** End Patch"
	tests := []struct {
		name   string
		script demomodel.Script
		types  string
		check  func(t *testing.T, evs []sseEvent)
	}{{
		name:   "text",
		script: demomodel.RespondID("resp-1", demomodel.Message("Hel", "lo").WithID("msg-1").WithPhase("final_answer")),
		types:  "created output_item.added output_text.delta output_text.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			if got := field(evs[0].Data, "response", "id"); got != "resp-1" {
				t.Errorf("created id = %v", got)
			}
			added := evs[1].Data
			if field(added, "item", "type") != "message" || field(added, "item", "role") != "assistant" ||
				field(added, "item", "id") != "msg-1" || field(added, "item", "phase") != "final_answer" {
				t.Errorf("added = %v", added)
			}
			for i, want := range []string{"Hel", "lo"} {
				d := evs[2+i].Data
				if d["delta"] != want || d["item_id"] != "msg-1" {
					t.Errorf("delta %d = %v, want %q", i, d, want)
				}
			}
			if got := field(evs[4].Data, "item", "content", 0, "text"); got != "Hello" {
				t.Errorf("done text = %v, want Hello", got)
			}
			if got := field(evs[4].Data, "item", "content", 0, "type"); got != "output_text" {
				t.Errorf("done content type = %v", got)
			}
			u := field(evs[5].Data, "response", "usage")
			if field(u, "input_tokens") != 100.0 || field(u, "output_tokens") != 10.0 || field(u, "total_tokens") != 110.0 {
				t.Errorf("usage = %v", u)
			}
			if field(evs[5].Data, "response", "id") != "resp-1" {
				t.Errorf("completed = %v", evs[5].Data)
			}
		},
	}, {
		name:   "message without id gets one",
		script: demomodel.Text("a"),
		types:  "created output_item.added output_text.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			id, _ := field(evs[1].Data, "item", "id").(string)
			if !strings.HasPrefix(id, "msg_") || evs[2].Data["item_id"] != id || field(evs[3].Data, "item", "id") != id {
				t.Errorf("ids: added %v, delta %v, done %v", id, evs[2].Data["item_id"], field(evs[3].Data, "item", "id"))
			}
		},
	}, {
		name: "reasoning",
		script: demomodel.Respond(
			demomodel.Reasoning("Think ", "hard").WithID("rs-1").WithSummaryPart("Part ", "two").WithRaw("raw ", "text"),
			demomodel.Message("ok"),
		),
		types: "created output_item.added " +
			"reasoning_summary_part.added reasoning_summary_text.delta reasoning_summary_text.delta reasoning_summary_text.done " +
			"reasoning_summary_part.added reasoning_summary_text.delta reasoning_summary_text.delta reasoning_summary_text.done " +
			"reasoning_text.delta reasoning_text.delta output_item.done " +
			"output_item.added output_text.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			if field(evs[1].Data, "item", "type") != "reasoning" {
				t.Errorf("added = %v", evs[1].Data)
			}
			if evs[7].Data["summary_index"] != 1.0 || evs[7].Data["delta"] != "Part " {
				t.Errorf("second part delta = %v", evs[7].Data)
			}
			if evs[10].Data["delta"] != "raw " || evs[10].Data["content_index"] != 0.0 {
				t.Errorf("raw delta = %v", evs[10].Data)
			}
			done := evs[12].Data
			if field(done, "item", "summary", 0, "text") != "Think hard" || field(done, "item", "summary", 1, "text") != "Part two" ||
				field(done, "item", "content", 0, "text") != "raw text" || field(done, "item", "content", 0, "type") != "reasoning_text" {
				t.Errorf("done = %v", done)
			}
			if evs[13].Data["output_index"] != 1.0 {
				t.Errorf("message output_index = %v, want 1", evs[13].Data["output_index"])
			}
		},
	}, {
		name:   "exec_command",
		script: demomodel.Respond(demomodel.ExecCommand("call-1", "echo hi").WithID("fc-1")),
		types:  "created output_item.added function_call_arguments.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			item := field(evs[3].Data, "item")
			if field(item, "type") != "function_call" || field(item, "call_id") != "call-1" ||
				field(item, "name") != "exec_command" || field(item, "id") != "fc-1" {
				t.Errorf("item = %v", item)
			}
			if _, ok := item.(map[string]any)["namespace"]; ok {
				t.Errorf("exec_command has a namespace: %v", item)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(field(item, "arguments").(string)), &args); err != nil || args["cmd"] != "echo hi" {
				t.Errorf("arguments = %v (%v)", field(item, "arguments"), err)
			}
			if field(evs[1].Data, "item", "arguments") != "" {
				t.Errorf("added arguments = %v, want empty", field(evs[1].Data, "item", "arguments"))
			}
		},
	}, {
		name:   "mcp call",
		script: demomodel.Respond(demomodel.MCPCall("call-2", "meshweaver", "echo", `{"text":"hi"}`)),
		types:  "created output_item.added function_call_arguments.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			item := field(evs[3].Data, "item")
			if field(item, "name") != "echo" || field(item, "namespace") != "mcp__meshweaver" ||
				field(item, "arguments") != `{"text":"hi"}` || field(item, "call_id") != "call-2" {
				t.Errorf("item = %v", item)
			}
		},
	}, {
		name:   "apply_patch",
		script: demomodel.Respond(demomodel.ApplyPatch("call-p1", patch)),
		types:  "created output_item.added custom_tool_call_input.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			item := field(evs[3].Data, "item")
			if field(item, "type") != "custom_tool_call" || field(item, "name") != "apply_patch" ||
				field(item, "input") != patch || field(item, "call_id") != "call-p1" {
				t.Errorf("item = %v", item)
			}
			if evs[2].Data["delta"] != patch {
				t.Errorf("delta = %v", evs[2].Data)
			}
		},
	}, {
		name: "usage",
		script: demomodel.Text("x").WithUsage(demomodel.Usage{
			InputTokens: 150, CachedInputTokens: 100, OutputTokens: 7, ReasoningOutputTokens: 3,
		}),
		types: "created output_item.added output_text.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			u := field(evs[4].Data, "response", "usage")
			if field(u, "input_tokens") != 150.0 || field(u, "input_tokens_details", "cached_tokens") != 100.0 ||
				field(u, "output_tokens") != 7.0 || field(u, "output_tokens_details", "reasoning_tokens") != 3.0 ||
				field(u, "total_tokens") != 157.0 {
				t.Errorf("usage = %v", u)
			}
		},
	}, {
		name:   "no usage",
		script: demomodel.Text("x").WithoutUsage(),
		types:  "created output_item.added output_text.delta output_item.done completed",
		check: func(t *testing.T, evs []sseEvent) {
			if u := field(evs[4].Data, "response", "usage"); u != nil {
				t.Errorf("usage = %v, want none", u)
			}
		},
	}, {
		name:   "response.failed",
		script: demomodel.Failed(demomodel.CodeContextLengthExceeded, "too long"),
		types:  "created failed",
		check: func(t *testing.T, evs []sseEvent) {
			if field(evs[1].Data, "response", "error", "code") != "context_length_exceeded" ||
				field(evs[1].Data, "response", "error", "message") != "too long" {
				t.Errorf("failed = %v", evs[1].Data)
			}
		},
	}, {
		name:   "EOF drops completed",
		script: demomodel.Text("partial").EOF(),
		types:  "created output_item.added output_text.delta output_item.done",
	}, {
		name: "raw item",
		script: demomodel.Respond(demomodel.RawItem(demomodel.NewEvent("response.custom", map[string]any{"x": 1}))).
			WithHeader("X-Test", "yes"),
		types: "created custom completed",
		check: func(t *testing.T, evs []sseEvent) {
			if evs[1].Data["x"] != 1.0 {
				t.Errorf("raw = %v", evs[1].Data)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, demomodel.Options{})
			s.Enqueue(tc.script)
			evs := stream(t, s)
			if got := types(evs); got != tc.types {
				t.Fatalf("events:\n got %s\nwant %s", got, tc.types)
			}
			if tc.check != nil {
				tc.check(t, evs)
			}
		})
	}
}

func TestScriptHTTPErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   demomodel.Script
		status   int
		code     string
		errType  string
		contains string
	}{
		{"500", demomodel.InternalServerError(), 500, "server_error", "server_error", "server had an error"},
		{"429 rate limit", demomodel.RateLimited(), 429, "rate_limit_exceeded", "requests", "Rate limit"},
		{"429 quota", demomodel.InsufficientQuota(), 429, "insufficient_quota", "insufficient_quota", "quota"},
		{"401", demomodel.Unauthorized(), 401, "invalid_api_key", "invalid_request_error", "API key"},
		{"400 context", demomodel.ContextLengthExceeded(), 400, "context_length_exceeded", "invalid_request_error", "context window"},
		{"custom", demomodel.HTTPError(403, demomodel.APIError{Message: "nope", Type: "forbidden"}), 403, "", "forbidden", "nope"},
	}
	s := startServer(t, demomodel.Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.Enqueue(tc.script.WithHeader("Retry-After", "1"))
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			resp := post(t, ctx, s, userBody("x"), nil)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("extra header missing: %v", resp.Header)
			}
			var v struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			code := ""
			if v.Error.Code != nil {
				code = *v.Error.Code
			}
			if code != tc.code || v.Error.Type != tc.errType || !strings.Contains(v.Error.Message, tc.contains) {
				t.Errorf("body = %s", body)
			}
			if !strings.Contains(string(body), `"param":null`) {
				t.Errorf("body lacks param:null: %s", body)
			}
		})
	}
}

func TestWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"one", []string{"one"}},
		{"Hello big world", []string{"Hello ", "big ", "world"}},
		{"  lead and trail  ", []string{"  ", "lead ", "and ", "trail  "}},
		{"line\nbreak", []string{"line\n", "break"}},
	}
	for _, tc := range tests {
		got := demomodel.Words(tc.in)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("Words(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Join(got, "") != tc.in {
			t.Errorf("Words(%q) does not join back: %q", tc.in, got)
		}
	}
}

func TestScriptValueSemantics(t *testing.T) {
	t.Parallel()
	base := demomodel.Text("a")
	_ = base.WithUsage(demomodel.Usage{InputTokens: 1}).Cut()
	_ = base.WithHeader("X", "1")
	if base.CutStream || base.Header != nil || len(base.Events) != 5 {
		t.Fatalf("base script changed: %+v", base)
	}
	if got := compactJSON(t, base.Events[4].Data); !strings.Contains(got, `"input_tokens":100`) {
		t.Errorf("base usage changed: %s", got)
	}
	if got := demomodel.ExecCommand("c", "x").CallID(); got != "c" {
		t.Errorf("CallID = %q", got)
	}
	if s := demomodel.Text("a").Hang(); !s.HangStream || len(s.Events) != 4 {
		t.Errorf("Hang = %+v", s)
	}
	if s := demomodel.Text("a").Cut(); !s.CutStream || len(s.Events) != 4 {
		t.Errorf("Cut = %+v", s)
	}
	if s := demomodel.Text("a").WithDelay(5); s.Delay != 5 {
		t.Errorf("WithDelay = %+v", s)
	}
	if ev := demomodel.NewEvent("t", nil); compactJSON(t, ev.Data) != `{"type":"t"}` {
		t.Errorf("NewEvent(nil) = %s", ev.Data)
	}
}
