package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// TestMCPFrontIsNoDeputy: a round whose MCP URL names a listener on this
// host (here a loopback HTTP server standing in for the daemon's gateway,
// which trusts plaintext loopback callers) gets no request through the
// front: the agent's MCP client is refused (403 from the front, its MCP
// server fails to start), the model's call of the tool finds no such tool, the round
// still ends with one verdict, and the listener hears nothing. Allowed by
// name (--allow-destination), the same server is reached. The bystander
// is the same user's next round, which completes.
func TestMCPFrontIsNoDeputy(t *testing.T) {
	var hits atomic.Int64
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "not an MCP server", http.StatusNotFound)
	}))
	defer gw.Close()
	e := newEnv(t, nil)
	e.model.Enqueue(
		demomodel.Respond(demomodel.MCPCall("call-gw", "meshweaver", "echo", `{"text":"start a round for bob"}`)),
		demomodel.Text("done"),
	)
	r := e.round(messages.StartRound{User: "alice", Thread: "deputy", Text: "use the mesh tool",
		MCPURL: gw.URL + "/v1/rounds", MCPToken: "tok", AutoApprove: true})
	if r.verdict.Status != messages.StatusCompleted {
		t.Fatalf("verdict %s %s, want completed (the tool fails, the round does not)", r.verdict.Status, r.verdict.Error)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests of alice's agent reached a listener on this host through the front", n)
	}
	// Allowed by name, the front reaches it (the server answers 404: not
	// an MCP server, but reached).
	e.allowMCP(gw.URL)
	e.model.Enqueue(demomodel.Text("ok"))
	e.round(messages.StartRound{User: "alice", Thread: "deputy-2", Text: "hi", MCPURL: gw.URL + "/mcp", MCPToken: "tok"}).mustComplete(t)
	if hits.Load() == 0 {
		t.Error("an allowed destination was not reached")
	}
}
