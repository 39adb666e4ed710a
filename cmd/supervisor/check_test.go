package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshweaver/supervisor/isolate"
)

// TestCheckProbesARound: serve --check starts the real CLI the way a
// user's round would (as a user uid under bubblewrap when the host
// allows) and runs a command in its sandbox in the workspace; where a
// round's commands would fail, the check fails naming the path and the
// fix, and it leaves nothing behind (no homes, no probe folder).
func TestCheckProbesARound(t *testing.T) {
	root, exe, workspace := checkRig(t)
	homes := filepath.Join(root, "homes")
	check := []string{"serve", "--check", "--homes", homes, "--workspace", workspace, "--codex", opsCodexBin(t)}
	asRoot := os.Geteuid() == 0
	_, err := exec.LookPath("bwrap")
	bwrap := err == nil

	leftNothing := func(what string) {
		t.Helper()
		if _, err := os.Stat(homes); err == nil {
			t.Errorf("%s: serve --check created the homes", what)
		}
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), isolate.ProbePrefix) {
				t.Errorf("%s: serve --check left its probe folder %s", what, e.Name())
			}
		}
	}

	code, stdout, stderr := cliRun(t, exe, nil, check...)
	if code != 0 || !strings.Contains(stdout, "ran a command in the workspace in its read-only sandbox") {
		t.Errorf("serve --check on a servable workspace: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if asRoot && !strings.Contains(stdout, "as uid 299999") {
		t.Errorf("serve --check as root did not probe as a user uid: %q", stdout)
	}
	// What the users' agents can reach: as root their uids are refused;
	// otherwise each plaintext listener is named.
	if want := "the users' uids (200000-299999) are refused on the daemon's listeners: remote 127.0.0.1:4100, metrics 127.0.0.1:4101"; asRoot && !strings.Contains(stdout, want) {
		t.Errorf("serve --check as root: %q lacks %q", stdout, want)
	}
	if want := "warning: a user's agent can reach these listeners without authentication: remote 127.0.0.1:4100, metrics 127.0.0.1:4101"; !asRoot && !strings.Contains(stdout, want) {
		t.Errorf("serve --check: %q lacks %q", stdout, want)
	}
	leftNothing("valid")

	// A workspace the users may pass through but not read: the path
	// check lets it by, a round's agent would see none of its files.
	if asRoot {
		if err := os.Chmod(workspace, 0o711); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := cliRun(t, exe, nil, check...)
		if code != 2 || !strings.Contains(stderr, "cannot list the workspace "+workspace+" (mode 0711)") ||
			!strings.Contains(stderr, "chmod o+rx "+workspace) {
			t.Errorf("serve --check on an unreadable workspace: exit %d, stderr %q", code, stderr)
		}
		leftNothing("unreadable workspace")
		if err := os.Chmod(workspace, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Rounds may ask for workspace-write, but bubblewrap binds the
	// workspace read-only: every shell command of such a round would fail
	// in the CLI's sandbox.
	if bwrap {
		code, _, stderr := cliRun(t, exe, nil, append(check, "--max-sandbox", "workspace-write")...)
		if code != 2 || !strings.Contains(stderr, "cannot start in the workspace-write sandbox") ||
			!strings.Contains(stderr, "--workspace-writable") || !strings.Contains(stderr, workspace) {
			t.Errorf("serve --check with --max-sandbox workspace-write on a read-only workspace: exit %d, stderr %q", code, stderr)
		}
		leftNothing("read-only workspace")
	}

	// An override the CLI refuses: the app-server never answers, and the
	// check says so with the CLI's own words.
	code, _, stderr = cliRun(t, exe, nil, append(check, "--codex-override", "sandbox_mode=bogus")...)
	if code != 2 || !strings.Contains(stderr, "does not answer") || !strings.Contains(stderr, "sandbox_mode") {
		t.Errorf("serve --check with an override the CLI refuses: exit %d, stderr %q", code, stderr)
	}
	leftNothing("bad override")
}

// checkRig is a folder for serve --check with the built binary and a
// workspace (0755) the users may read, as servable makes it.
func checkRig(t *testing.T) (root, exe, workspace string) {
	t.Helper()
	root = t.TempDir()
	exe = opsBuild(t, root)
	workspace = filepath.Join(root, "workspace")
	if err := os.MkdirAll(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	servable(t, root, workspace)
	return root, exe, workspace
}
