package mcpfront

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproc"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/mcpecho"
	"github.com/meshweaver/supervisor/testkit/codexhome"
	"github.com/meshweaver/supervisor/testkit/proctest"
)

// TestRealCLITokenChangesWithoutResume: the real CLI loads a thread whose
// MCP server is the front, once. Between two turns the round's token
// changes (Set), with no thread/unsubscribe and no thread/resume: the MCP
// server sees the first token on the first turn's call and the second on
// the second's.
func TestRealCLITokenChangesWithoutResume(t *testing.T) {
	bin, err := codexhome.CodexBin()
	if err != nil {
		t.Fatalf("the real codex CLI is required (run scripts/install-codex): %v", err)
	}
	model, err := demomodel.Start(demomodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	// approval never runs only tools that say they are read-only.
	mcp, err := mcpecho.Start(mcpecho.Options{Annotations: map[string]map[string]any{"echo": {"readOnlyHint": true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer mcp.Close()
	f, logs := newFront(t, Options{})
	key := Key{User: "ann", Thread: "mesh/1"}
	if err := f.Set(key, mcp.URL(), "token-first"); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	home, err := codexhome.MkHome(dir, model.URL())
	if err != nil {
		t.Fatal(err)
	}
	completed := make(chan string, 8)
	proc, err := codexproc.Start(codexproc.Config{
		Binary: bin, Home: home, Dir: work, StopGrace: time.Second,
		Env:    codexproc.AllowedEnv(os.Environ(), []string{"HOME=" + t.TempDir(), "TMPDIR=/var/tmp"}),
		Logger: slog.New(slog.DiscardHandler),
		Conn: codexrpc.Options{
			Logger: slog.New(slog.DiscardHandler),
			OnNotification: func(n *codexrpc.Notification) {
				if n.Method == codexproto.NoteTurnCompleted {
					var p struct {
						Turn codexproto.Turn `json:"turn"`
					}
					_ = json.Unmarshal(n.Params, &p)
					completed <- p.Turn.Status
				}
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := proc.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		proctest.WaitGroupGone(t, proc.PID(), 5*time.Second, 5*time.Millisecond)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := codexproto.NewClient(proc.Conn())
	if _, err := c.Initialize(ctx, codexproto.ClientInfo{Name: "mcpfront-test", Version: "1"}); err != nil {
		t.Fatal(err)
	}
	th, err := c.ThreadStart(ctx, codexproto.ThreadStartParams{
		Cwd: work, Sandbox: codexproto.SandboxReadOnly, ApprovalPolicy: codexproto.ApprovalNever,
		Config: map[string]any{"mcp_servers": map[string]any{"meshweaver": map[string]any{"url": f.Bind(key)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	turn := func(id string) {
		t.Helper()
		model.Enqueue(demomodel.Respond(demomodel.MCPCall(id, "meshweaver", "echo", `{"text":"`+id+`"}`)), demomodel.Text("done"))
		if _, err := c.TurnStart(ctx, codexproto.TurnStartParams{ThreadID: th.Thread.ID, Input: codexproto.TextInput("use the tool")}); err != nil {
			t.Fatal(err)
		}
		select {
		case st := <-completed:
			if st != codexproto.TurnCompleted {
				t.Fatalf("turn %s ended %s", id, st)
			}
		case <-ctx.Done():
			t.Fatalf("turn %s never completed", id)
		}
	}
	turn("call-1")
	if err := f.Set(key, mcp.URL(), "token-second"); err != nil {
		t.Fatal(err)
	}
	turn("call-2")

	calls := mcp.Calls()
	if len(calls) != 2 {
		t.Fatalf("the MCP server saw %d tool calls, want 2: %+v", len(calls), calls)
	}
	for i, want := range []string{"Bearer token-first", "Bearer token-second"} {
		if got := calls[i].Header.Get("Authorization"); got != want {
			t.Errorf("call %d: Authorization %q, want %q", i+1, got, want)
		}
	}
	// The CLI opened its MCP session once, with the first token.
	inits := 0
	for _, r := range mcp.Requests() {
		if r.HasMethod("initialize") {
			inits++
			if r.Authorization() != "Bearer token-first" {
				t.Errorf("initialize with %q", r.Authorization())
			}
		}
	}
	if inits != 1 {
		t.Errorf("%d MCP initializations, want 1 (the thread was loaded once)", inits)
	}
	if out, ok := model.Requests()[len(model.Requests())-1].ToolOutput("call-2"); !ok || out == "" {
		t.Errorf("the model got no output of the second call")
	}
	if strings.Contains(logs.String(), "token-") {
		t.Errorf("a token is in the front's log")
	}
}
