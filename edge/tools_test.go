package edge

import (
	"testing"

	"github.com/meshweaver/supervisor/messages"
)

// A tool server's result is of kind tools for its user: an identity
// granted other kinds, or tools for another user, may not send it.
func TestToolResultsNeedTheToolsKind(t *testing.T) {
	k, user, ok := KindOf(messages.ToolCallResult{User: "alice", RoundID: "r", RequestID: "t-1"})
	if !ok || k != KindTools || user != "alice" {
		t.Fatalf("KindOf = %q %q %v, want tools for alice", k, user, ok)
	}
	p, err := ParsePolicy([]byte(`{"version":1,"grants":[
		{"identities":["uri:spiffe://mesh/tools"],"users":["alice"],"kinds":["tools"]},
		{"identities":["uri:spiffe://mesh/chat"],"users":["*"],"kinds":["rounds","control"]}]}`))
	if err != nil {
		t.Fatalf("a policy granting tools: %v", err)
	}
	for _, c := range []struct {
		id, user string
		want     bool
	}{
		{"uri:spiffe://mesh/tools", "alice", true},
		{"uri:spiffe://mesh/tools", "bob", false},
		{"uri:spiffe://mesh/chat", "alice", false},
	} {
		if got := p.Allows(c.id, c.user, KindTools); got != c.want {
			t.Errorf("%s for %s: %v, want %v", c.id, c.user, got, c.want)
		}
	}
}

// A codex request is a read (account) or, for the MCP reload, control.
func TestCodexRequestKinds(t *testing.T) {
	for method, want := range map[string]Kind{"config/read": KindAccount, "mcpServerStatus/list": KindAccount,
		"configRequirements/read": KindAccount, "config/mcpServer/reload": KindControl} {
		if k, user, ok := KindOf(messages.CodexRequest{User: "alice", Method: method}); !ok || k != want || user != "alice" {
			t.Errorf("%s: %q %q %v, want %q", method, k, user, ok, want)
		}
	}
}
