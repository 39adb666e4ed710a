package mockmodel_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/testkit/mockmodel"
)

// requestWith builds a Request whose input holds the given items.
func requestWith(t *testing.T, kind string, items ...any) *mockmodel.Request {
	t.Helper()
	r := &mockmodel.Request{Header: http.Header{}}
	if kind != "" {
		r.Header.Set(mockmodel.TurnMetadataHeader, `{"request_kind":"`+kind+`"}`)
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
		req  *mockmodel.Request
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
		got := mockmodel.DemoReply(tc.req)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: DemoReply = %q, want it to contain %q", tc.name, got, w)
			}
		}
		sc := mockmodel.DemoResponder(tc.req)
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
		if mockmodel.DemoReply(tc.req) != got {
			t.Errorf("%s: DemoReply is not deterministic", tc.name)
		}
	}
}

func TestToolThenText(t *testing.T) {
	t.Parallel()
	call := mockmodel.ExecCommand("call-9", "ls")
	r := mockmodel.ToolThenText(call, "all ", "done")
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
