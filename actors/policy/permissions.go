package policy

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshweaver/supervisor/actors/internal/textcut"
	"github.com/meshweaver/supervisor/codexproto"
	"github.com/meshweaver/supervisor/messages"
)

// Bounds are the operator's bounds on what a permissions request may be
// granted: never more than --max-sandbox allows. Under read-only, reads
// only (the sandbox reads the host already); under workspace-write, writes
// inside the workspace too; network and writes elsewhere only under
// danger-full-access. The zero Bounds grants reads only.
type Bounds struct {
	MaxSandbox string // codexproto.Sandbox*
	Workspace  string // absolute
}

// maxPermissionPaths bounds the paths of a request the daemon looks at
// (and shows a caller); more are not granted.
const maxPermissionPaths = 64

// grant is what of asked b lets the daemon grant.
func (b Bounds) grant(asked codexproto.PermissionProfile) codexproto.PermissionProfile {
	var out codexproto.PermissionProfile
	if fs := asked.FileSystem; fs != nil {
		g := &codexproto.FileSystemPermissions{}
		for _, p := range clip(fs.Read) {
			if filepath.IsAbs(p) {
				g.Read = append(g.Read, filepath.Clean(p))
			}
		}
		for _, p := range clip(fs.Write) {
			if !filepath.IsAbs(p) {
				continue
			}
			p = filepath.Clean(p)
			switch b.MaxSandbox {
			case codexproto.SandboxDangerFullAccess:
				g.Write = append(g.Write, p)
			case codexproto.SandboxWorkspaceWrite:
				if b.Workspace != "" && (p == b.Workspace || strings.HasPrefix(p, b.Workspace+string(filepath.Separator))) {
					g.Write = append(g.Write, p)
				}
			}
		}
		if len(g.Read) > 0 || len(g.Write) > 0 {
			out.FileSystem = g
		}
	}
	if n := asked.Network; n != nil && n.Enabled != nil && *n.Enabled && b.MaxSandbox == codexproto.SandboxDangerFullAccess {
		on := true
		out.Network = &codexproto.NetworkPermissions{Enabled: &on}
	}
	return out
}

func clip(paths []string) []string { return paths[:min(len(paths), maxPermissionPaths)] }

// permissionsParams reads a permissions request.
func permissionsParams(raw json.RawMessage) codexproto.PermissionsParams {
	var p codexproto.PermissionsParams
	_ = json.Unmarshal(raw, &p)
	return p
}

// permissionsAnswer grants, when approve, what of the request b allows,
// for the turn (or the session); nothing otherwise.
func permissionsAnswer(raw json.RawMessage, approve, session bool, b Bounds) codexproto.PermissionsAnswer {
	ans := codexproto.PermissionsAnswer{Scope: "turn"}
	if approve {
		ans.Permissions = b.grant(permissionsParams(raw).Permissions)
		if session {
			ans.Scope = "session"
		}
	}
	return ans
}

// shownPermissions is a profile as a caller sees it.
func shownPermissions(p codexproto.PermissionProfile) *messages.Permissions {
	out := &messages.Permissions{}
	if fs := p.FileSystem; fs != nil {
		for _, r := range clip(fs.Read) {
			out.Read = append(out.Read, textcut.Runes(r, 4096))
		}
		for _, w := range clip(fs.Write) {
			out.Write = append(out.Write, textcut.Runes(w, 4096))
		}
	}
	out.Network = p.Network != nil && p.Network.Enabled != nil && *p.Network.Enabled
	return out
}

// permissionsQuestion is the notice of a permissions request answered in
// line: what was asked and what was granted.
func permissionsQuestion(raw json.RawMessage, granted codexproto.PermissionProfile) string {
	asked := shownPermissions(permissionsParams(raw).Permissions)
	got := shownPermissions(granted)
	text := "Codex asked for permissions (" + describePerms(asked) + "); granted: " + describePerms(got)
	return text
}

func describePerms(p *messages.Permissions) string {
	var parts []string
	if len(p.Read) > 0 {
		parts = append(parts, "read "+strings.Join(p.Read, ", "))
	}
	if len(p.Write) > 0 {
		parts = append(parts, "write "+strings.Join(p.Write, ", "))
	}
	if p.Network {
		parts = append(parts, "network")
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(slices.Clip(parts), "; ")
}
