package actors

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/messages"
)

// An authorized caller reads the user's codex configuration, its
// requirements and its MCP servers' status, and reloads the MCP servers,
// through the daemon (the real CLI answers); a method the daemon does not
// pass on is rejected before it reaches codex.
func TestCodexRequestsPassed(t *testing.T) {
	h := newHarness(t, nil)
	c := h.caller()
	for _, method := range []string{"config/read", "configRequirements/read", "mcpServerStatus/list", "config/mcpServer/reload"} {
		h.engine.SendWithSender(h.root, messages.CodexRequest{User: "alice", Method: method}, c.pid)
		r := expect[messages.CodexResponse](t, c)
		if r.Error != "" || r.Method != method || r.User != "alice" || !json.Valid([]byte(r.Result)) {
			t.Errorf("%s: %+v", method, r)
		}
		if method == "config/read" && !strings.Contains(r.Result, "mock-model") {
			t.Errorf("config/read does not show the daemon's model override: %.300s", r.Result)
		}
	}
	h.engine.SendWithSender(h.root, messages.CodexRequest{User: "alice", Method: "thread/start"}, c.pid)
	if rej := expect[messages.Rejected](t, c); !strings.Contains(rej.Reason, "not one the daemon passes on") {
		t.Errorf("thread/start through CodexRequest: %+v", rej)
	}
}
