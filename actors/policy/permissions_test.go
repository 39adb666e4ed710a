package policy

import (
	"encoding/json"
	"testing"

	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/codexrpc"
	"github.com/meshweaver/supervisor/messages"
	"github.com/meshweaver/supervisor/testkit/jsoneq"
)

// A permissions request is granted no more than --max-sandbox allows:
// reads always, writes inside the workspace under workspace-write, writes
// elsewhere and network only under danger-full-access; without approval,
// nothing. Relative paths are never granted, and the scope is the turn
// unless a caller accepts for the session.
func TestPermissionsWithinTheBounds(t *testing.T) {
	r := &codexrpc.Request{Method: codexproto.ReqPermissions, Params: json.RawMessage(`{"threadId":"t","turnId":"u","itemId":"i","cwd":"/ws",
		"reason":"build","permissions":{"fileSystem":{"read":["/etc/hosts","rel"],"write":["/ws/out","/etc","/ws/../etc"]},"network":{"enabled":true}}}`)}
	ws := "/ws"
	for _, c := range []struct {
		name string
		b    Bounds
		auto bool
		want string
	}{
		{"declined", Bounds{MaxSandbox: codexproto.SandboxDangerFullAccess, Workspace: ws}, false, `{"permissions":{"fileSystem":null,"network":null},"scope":"turn"}`},
		{"read-only", Bounds{MaxSandbox: codexproto.SandboxReadOnly, Workspace: ws}, true, `{"permissions":{"fileSystem":{"read":["/etc/hosts"]},"network":null},"scope":"turn"}`},
		{"workspace-write", Bounds{MaxSandbox: codexproto.SandboxWorkspaceWrite, Workspace: ws}, true, `{"permissions":{"fileSystem":{"read":["/etc/hosts"],"write":["/ws/out"]},"network":null},"scope":"turn"}`},
		{"full access", Bounds{MaxSandbox: codexproto.SandboxDangerFullAccess, Workspace: ws}, true, `{"permissions":{"fileSystem":{"read":["/etc/hosts"],"write":["/ws/out","/etc","/etc"]},"network":{"enabled":true}},"scope":"turn"}`},
	} {
		res, q, err := Answer(r, c.auto, c.b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := jsoneq.String(res); got != jsoneq.String(json.RawMessage(c.want)) {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
		if q == "" {
			t.Errorf("%s: no notice for the caller", c.name)
		}
	}
	b := Bounds{MaxSandbox: codexproto.SandboxWorkspaceWrite, Workspace: ws}
	shown, ok := Describe(r, b)
	if !ok || shown.Type != messages.RequestPermissions || shown.Reason != "build" || !shown.Permissions.Network ||
		len(shown.Permissions.Write) != 3 || shown.Grantable.Network || len(shown.Grantable.Write) != 1 {
		t.Errorf("shown %+v (%+v, grantable %+v)", shown, shown.Permissions, shown.Grantable)
	}
	res, _, err := CallerAnswer(r, messages.AnswerRequest{Decision: messages.DecisionAcceptForSession}, b)
	if err != nil || res.(codexproto.PermissionsAnswer).Scope != "session" || len(res.(codexproto.PermissionsAnswer).Permissions.FileSystem.Write) != 1 {
		t.Errorf("accepted for the session: %+v, %v", res, err)
	}
	res, _, err = CallerAnswer(r, messages.AnswerRequest{Decision: messages.DecisionDecline}, b)
	if err != nil || res.(codexproto.PermissionsAnswer).Permissions.FileSystem != nil {
		t.Errorf("declined: %+v, %v", res, err)
	}
	if _, _, err := CallerAnswer(r, messages.AnswerRequest{}, b); err == nil {
		t.Error("an answer with no decision was taken")
	}
	if res, err := Decline(codexproto.ReqPermissions); err != nil || res.(codexproto.PermissionsAnswer).Permissions.FileSystem != nil {
		t.Errorf("Decline: %+v %v", res, err)
	}
}
