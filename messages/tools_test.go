package messages

import (
	"strings"
	"testing"
)

// A round's tools and a tool server's result are checked like the rest of
// a message: bounded, named, each tool served by an actor.
func TestToolsValidate(t *testing.T) {
	server := &PID{Address: "127.0.0.1:4200", ID: "mesh/tools"}
	ok := DynamicTool{Name: "lookup", Description: "d", InputSchema: `{"type":"object"}`, Server: server}
	base := StartRound{User: "a", Thread: "t", Text: "x"}
	for name, c := range map[string]struct {
		tools []DynamicTool
		want  string
	}{
		"fine":         {[]DynamicTool{ok}, ""},
		"bad name":     {[]DynamicTool{{Name: "look up", InputSchema: `{}`, Server: server}}, "tools[0].name"},
		"twice":        {[]DynamicTool{ok, ok}, "declared twice"},
		"no server":    {[]DynamicTool{{Name: "x", InputSchema: `{}`}}, "names no actor"},
		"schema array": {[]DynamicTool{{Name: "x", InputSchema: `[1]`, Server: server}}, "not a JSON object"},
		"too many":     {make([]DynamicTool, MaxTools+1), "max 16"},
		"huge schema":  {[]DynamicTool{{Name: "x", InputSchema: `{"a":"` + strings.Repeat("x", MaxToolSchemaLen) + `"}`, Server: server}}, "input_schema is"},
	} {
		m := base
		m.Tools = c.tools
		err := m.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if err := (ToolCallResult{User: "a", RoundID: "r", RequestID: "t-1", Text: "ok"}).Validate(); err != nil {
		t.Errorf("a result: %v", err)
	}
	if err := (ToolCallResult{User: "a", RoundID: "r"}).Validate(); err == nil {
		t.Error("a result with no request id passed")
	}
	if err := (ToolCallResult{User: "a", RoundID: "r", RequestID: "t", Text: strings.Repeat("x", MaxToolResultLen+1)}).Validate(); err == nil {
		t.Error("a result over 1 MiB passed")
	}
}
