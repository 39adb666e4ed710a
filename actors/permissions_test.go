package actors

import (
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/demomodel"
	"github.com/meshweaver/supervisor/messages"
)

// permissionsHarness runs the real CLI with its request_permissions tool
// (still behind feature switches in 0.171.0) under on-request approvals,
// rounds allowed up to workspace-write.
func permissionsHarness(t *testing.T) (*harness, func() []string) {
	t.Helper()
	h := newHarness(t, func(c *tree) {
		c.Overrides = append(c.Overrides, "features.exec_permission_approvals=true", "features.request_permissions_tool=true")
		c.ApprovalPolicy, c.ApprovalPolicies = codexproto.ApprovalOnRequest, []string{codexproto.ApprovalOnRequest}
		c.MaxSandbox = codexproto.SandboxWorkspaceWrite
	})
	ws := h.cfg.Workspace
	var mu sync.Mutex
	var outputs []string
	h.model.SetResponder(func(req *demomodel.Request) demomodel.Script {
		if out, ok := req.ToolOutput("call_perm"); ok {
			mu.Lock()
			outputs = append(outputs, out)
			mu.Unlock()
			return demomodel.Text("noted")
		}
		args, _ := json.Marshal(map[string]any{"reason": "write the build output",
			"permissions": map[string]any{"file_system": map[string]any{"write": []string{filepath.Join(ws, "out"), "/etc"}},
				"network": map[string]any{"enabled": true}}})
		return demomodel.Respond(demomodel.FunctionCall("call_perm", "request_permissions", string(args)))
	})
	return h, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), outputs...)
	}
}

// grantedWrites reads the tool's output as the CLI gives it to the model:
// the paths granted for writing, and whether the network was.
func grantedWrites(t *testing.T, out string) ([]string, bool) {
	t.Helper()
	var g struct {
		Permissions struct {
			FileSystem *struct {
				Write []string `json:"write"`
			} `json:"file_system"`
			Network *struct {
				Enabled bool `json:"enabled"`
			} `json:"network"`
		} `json:"permissions"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("request_permissions' output %q: %v", out, err)
	}
	var w []string
	if g.Permissions.FileSystem != nil {
		w = g.Permissions.FileSystem.Write
	}
	return w, g.Permissions.Network != nil && g.Permissions.Network.Enabled
}

// With auto-approve, a permissions request gets what --max-sandbox allows
// (workspace-write: the workspace path, not /etc, no network), and the
// caller is told what was asked and granted. Without it, nothing.
func TestPermissionsGrantedWithinMaxSandbox(t *testing.T) {
	h, outputs := permissionsHarness(t)
	c := h.caller()
	res := h.round(c, messages.StartRound{User: "alice", Thread: "t1", Text: "build", RoundID: "a1", AutoApprove: true,
		Sandbox: codexproto.SandboxWorkspaceWrite})
	if res.verdict.Status != messages.StatusCompleted || len(outputs()) != 1 {
		t.Fatalf("verdict %s %s, outputs %q", res.verdict.Status, res.verdict.Error, outputs())
	}
	w, net := grantedWrites(t, (outputs())[0])
	if want := filepath.Join(h.cfg.Workspace, "out"); len(w) != 1 || w[0] != want || net {
		t.Errorf("granted writes %q, network %v: want only %s", w, net, want)
	}
	if qs := res.kinds(messages.KindQuestion); len(qs) != 1 {
		t.Errorf("%d notices of the permissions request, want 1", len(qs))
	}
	res = h.round(c, messages.StartRound{User: "alice", Thread: "t2", Text: "build", RoundID: "a2"})
	if w, net := grantedWrites(t, (outputs())[1]); res.verdict.Status != messages.StatusCompleted || len(w) != 0 || net {
		t.Errorf("without auto-approve: %s, granted %q %v; want nothing", res.verdict.Status, w, net)
	}
}

// Under on_request ask the request reaches the caller as a permissions
// question, with what the daemon can grant; the caller's accept grants
// that, for the turn.
func TestPermissionsAskedOfTheCaller(t *testing.T) {
	h, outputs := permissionsHarness(t)
	c := h.caller()
	h.engine.SendWithSender(h.root, messages.StartRound{User: "bob", Thread: "t1", Text: "build", RoundID: "b1",
		Sandbox: codexproto.SandboxWorkspaceWrite, OnRequest: messages.PolicyAsk, AskTimeoutMS: 30000}, c.pid)
	var verdict messages.RoundFinished
	asked := 0
	deadline := time.After(90 * time.Second)
	for verdict.Status == "" {
		select {
		case m := <-c.ch:
			switch m := m.(type) {
			case messages.RoundEvent:
				if m.Kind != messages.KindRequest {
					continue
				}
				asked++
				r := m.Request
				if r.Type != messages.RequestPermissions || r.Permissions == nil || !r.Permissions.Network || len(r.Permissions.Write) != 2 ||
					r.Grantable == nil || r.Grantable.Network || len(r.Grantable.Write) != 1 || r.Reason != "write the build output" {
					t.Errorf("the permissions question %+v (asked %+v, grantable %+v)", r, r.Permissions, r.Grantable)
				}
				h.engine.SendWithSender(h.root, messages.AnswerRequest{User: "bob", RoundID: "b1", RequestID: r.RequestID,
					Decision: messages.DecisionAccept}, c.pid)
			case messages.RoundFinished:
				verdict = m
			}
		case <-deadline:
			t.Fatal("no verdict")
		}
	}
	if verdict.Status != messages.StatusCompleted || asked != 1 || len(outputs()) != 1 {
		t.Fatalf("verdict %s %s, asked %d, outputs %q", verdict.Status, verdict.Error, asked, outputs())
	}
	if w, net := grantedWrites(t, (outputs())[0]); len(w) != 1 || net {
		t.Errorf("granted %q, network %v: want the workspace path only", w, net)
	}
}
