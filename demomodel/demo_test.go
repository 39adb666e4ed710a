package demomodel_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
)

// requestWith builds a Request whose input holds the given items.
func requestWith(t *testing.T, kind string, items ...any) *demomodel.Request {
	t.Helper()
	r := &demomodel.Request{Header: http.Header{}}
	if kind != "" {
		r.Header.Set(demomodel.TurnMetadataHeader, `{"request_kind":"`+kind+`"}`)
	}
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		r.Input = append(r.Input, b)
	}
	return r
}

func user(text string) map[string]any {
	return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
}

func TestDemoReply(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 100)
	tests := []struct {
		name string
		req  *demomodel.Request
		want []string
	}{
		{"echo", requestWith(t, "turn", user("<environment_context>"), user("  what   is\nGo? ")),
			[]string{"demo model", "You said: “what is Go?”"}},
		{"empty", requestWith(t, "turn"), []string{"Hello! I am the demo model."}},
		{"compaction", requestWith(t, "compaction", user("You are performing a CONTEXT CHECKPOINT COMPACTION")),
			[]string{"Summary (demo model)"}},
		{"tool output", requestWith(t, "turn", user("x"), map[string]any{"type": "function_call_output", "call_id": "c", "output": "ok"}),
			[]string{"The tool finished."}},
		{"long input is shortened", requestWith(t, "turn", user(long)), []string{"word word …”"}},
	}
	for _, tc := range tests {
		got := demomodel.DemoReply(tc.req)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: DemoReply = %q, want it to contain %q", tc.name, got, w)
			}
		}
		sc := demomodel.DemoResponder(tc.req)
		var deltas []string
		for _, ev := range sc.Events {
			if ev.Type == "response.output_text.delta" {
				var v struct{ Delta string }
				_ = json.Unmarshal(ev.Data, &v)
				deltas = append(deltas, v.Delta)
			}
		}
		if strings.Join(deltas, "") != got || len(deltas) < 3 {
			t.Errorf("%s: DemoResponder streams %q, want %q word by word", tc.name, deltas, got)
		}
		if demomodel.DemoReply(tc.req) != got {
			t.Errorf("%s: DemoReply is not deterministic", tc.name)
		}
	}
}

func TestToolThenText(t *testing.T) {
	t.Parallel()
	call := demomodel.ExecCommand("call-9", "ls")
	r := demomodel.ToolThenText(call, "all ", "done")
	first := r(requestWith(t, "turn", user("list")))
	if !strings.Contains(string(first.Events[1].Data), `"call_id":"call-9"`) {
		t.Errorf("first answer = %s", first.Events[1].Data)
	}
	second := r(requestWith(t, "turn", user("list"),
		map[string]any{"type": "function_call", "call_id": "call-9"},
		map[string]any{"type": "function_call_output", "call_id": "call-9", "output": "a b"}))
	if !strings.Contains(string(second.Events[2].Data), `"delta":"all "`) {
		t.Errorf("second answer = %s", second.Events[2].Data)
	}
}

func toolOutput(callID, output string) map[string]any {
	return map[string]any{"type": "function_call_output", "call_id": callID, "output": output}
}

// showcaseText is what a Script streams as message text, and how many
// text deltas it has.
func showcaseText(s demomodel.Script) (string, int) {
	var b strings.Builder
	n := 0
	for _, ev := range s.Events {
		var e struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		_ = json.Unmarshal(ev.Data, &e)
		if e.Type == "response.output_text.delta" {
			b.WriteString(e.Delta)
			n++
		}
	}
	return b.String(), n
}

// hasEvent reports whether s has an event of type typ whose data holds sub.
func hasEvent(s demomodel.Script, typ, sub string) bool {
	for _, ev := range s.Events {
		if strings.Contains(string(ev.Data), `"type":"`+typ+`"`) && strings.Contains(string(ev.Data), sub) {
			return true
		}
	}
	return false
}

// TestShowcaseResponder: the demo model thinks aloud and lists the
// workspace, asks to leave the sandbox for the note, answers a look back
// from the conversation it is sent (never from state of its own), and
// streams its answers word by word with a delay.
func TestShowcaseResponder(t *testing.T) {
	env := user("<environment_context>cwd</environment_context>")
	list := demomodel.ShowcaseResponder(requestWith(t, "", env, user("Hello! What is in the workspace?")))
	if !hasEvent(list, "response.reasoning_summary_text.delta", "") || !hasEvent(list, "response.output_item.done", `ls -l`) {
		t.Errorf("the listing round: no reasoning or no ls call")
	}
	if list.Delay <= 0 {
		t.Errorf("no delay between deltas: nothing visible streams")
	}
	after := demomodel.ShowcaseResponder(requestWith(t, "", env, user("Hello! What is in the workspace?"),
		toolOutput(demomodel.ShowcaseListCall, "Chunk ID: 1\nProcess exited with code 0\nOutput:\ntotal 4\n-rw------- 1 u u 66 Dec  3 06:36 SKILLS.md\n-rw------- 1 u u 1 Dec  3 06:36 b c.txt\n")))
	if text, n := showcaseText(after); !strings.Contains(text, "SKILLS.md and b c.txt") || n < 5 {
		t.Errorf("after the listing: %q in %d deltas", text, n)
	}
	note := demomodel.ShowcaseResponder(requestWith(t, "", env, user("Please save a note for me.")))
	if !hasEvent(note, "response.output_item.done", `require_escalated`) {
		t.Error("the note's command does not ask to leave the sandbox")
	}
	back := demomodel.ShowcaseResponder(requestWith(t, "", env, user("first thing"), user("second thing"), user("What did I ask you a moment ago?")))
	text, _ := showcaseText(back)
	if !strings.Contains(text, "“first thing”, then “second thing”") || strings.Contains(text, "environment_context") || strings.Contains(text, "moment ago") {
		t.Errorf("the look back: %q", text)
	}
	if text, _ := showcaseText(demomodel.ShowcaseResponder(requestWith(t, "", env, user("What did I ask you a moment ago?")))); !strings.Contains(text, "first exchange") {
		t.Errorf("a look back on a fresh thread: %q", text)
	}
}
