package actors

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
)

// thread/read's turns become the user's and the assistant's messages,
// oldest first; other items are left out; a non-object answer is an error.
func TestThreadTurns(t *testing.T) {
	raw := json.RawMessage(`{"thread":{"id":"th","turns":[
		{"id":"u1","items":[
			{"type":"userMessage","id":"a","content":[{"type":"text","text":"hello"},{"type":"image","url":"data:"},{"type":"text","text":"there"}]},
			{"type":"reasoning","id":"b","summary":["thinking"]},
			{"type":"commandExecution","id":"c","command":"ls"},
			{"type":"agentMessage","id":"d","text":"hi back"}]},
		{"id":"u2","items":[{"type":"userMessage","id":"e","content":[{"type":"image","url":"data:"}]},{"type":"agentMessage","id":"f","text":""}]}]}}`)
	got, err := threadTurns(raw)
	want := []messages.Turn{{Role: messages.RoleUser, Text: "hello\nthere"}, {Role: messages.RoleAssistant, Text: "hi back"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("threadTurns = %v, %v; want %v", got, err, want)
	}
	if _, err := threadTurns(json.RawMessage(`[1]`)); err == nil {
		t.Error("a non-object answer was read")
	}
}

// A compaction's turn/completed is success only when it completed.
func TestCompactEnd(t *testing.T) {
	if err := compactEnd(json.RawMessage(`{"threadId":"t","turn":{"id":"u","status":"completed"}}`)); err != nil {
		t.Errorf("completed: %v", err)
	}
	err := compactEnd(json.RawMessage(`{"threadId":"t","turn":{"id":"u","status":"failed","error":{"message":"too big"}}}`))
	if err == nil || !strings.Contains(err.Error(), "failed: too big") {
		t.Errorf("failed: %v", err)
	}
	if compactEnd(json.RawMessage(`"x"`)) == nil {
		t.Error("an unreadable end was success")
	}
}
