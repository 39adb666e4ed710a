package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	listen, metrics := checkAddrs(t)
	check := []string{"serve", "--check", "--homes", homes, "--workspace", workspace, "--codex", opsCodexBin(t),
		"--listen", listen, "--metrics-listen", metrics}
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
	if want := "the users' uids (200000-299999) are refused on the daemon's listeners: remote " + listen + ", metrics " + metrics; asRoot && !strings.Contains(stdout, want) {
		t.Errorf("serve --check as root: %q lacks %q", stdout, want)
	}
	if want := "warning: a user's agent can reach these listeners without authentication: remote " + listen + ", metrics " + metrics; !asRoot && !strings.Contains(stdout, want) {
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

// checkAddrs are free loopback addresses for --listen and
// --metrics-listen: serve --check binds what it is given, and another
// daemon on this host may hold the defaults.
func checkAddrs(t *testing.T) (listen, metrics string) {
	t.Helper()
	var err error
	if listen, err = freeLoopbackAddr(); err != nil {
		t.Fatal(err)
	}
	if metrics, err = freeLoopbackAddr(); err != nil {
		t.Fatal(err)
	}
	return listen, metrics
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

// TestCheckReportsEveryProblem: serve --check with a missing CLI, a
// --listen address this host does not have, a --metrics-listen port
// another process holds and a folder above the homes the users' uids
// cannot pass names each of them in one run (exit 2), and runs no probe.
// The address is TEST-NET-2 (RFC 5737), which no host is given.
// Before, it stopped at the missing CLI, and never tried the binds.
func TestCheckReportsEveryProblem(t *testing.T) {
	root, exe, workspace := checkRig(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	private := filepath.Join(root, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cliRun(t, exe, nil, "serve", "--check", "--homes", filepath.Join(private, "homes"),
		"--workspace", workspace, "--codex", filepath.Join(root, "no-codex"),
		"--listen", "198.51.100.5:4100", "--allow-plaintext", "--metrics-listen", held.Addr().String())
	want := []string{
		"codex binary: stat " + filepath.Join(root, "no-codex"),
		"--listen 198.51.100.5:4100 cannot be bound", "no interface of this host has that address",
		"--metrics-listen " + held.Addr().String() + " cannot be bound", "another process listens there",
		"a round's probe did not run",
	}
	if os.Geteuid() == 0 { // the users' uids: a uid switch
		want = append(want, "out of the users' reach: "+private+" (mode 0700)")
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("serve --check: stderr lacks %q", w)
		}
	}
	if code != 2 || strings.Contains(stdout, "valid") {
		t.Errorf("serve --check: exit %d, stdout %q, want 2 and no verdict of valid\nstderr: %s", code, stdout, stderr)
	}
}

// TestCheckWritesOnlyItsTempFolder: a CLI the users' uids cannot reach
// where it is installed (a 0700 folder) is linked by serve under
// isolate.DefaultCLILinks; serve --check links it into its probe's
// temporary folder instead, says so, removes it, and leaves the homes'
// parent and DefaultCLILinks as they were. Before, each new CLI build
// cost a check ~385 MB of hard links under /var/lib/meshweaver/codex-cli.
func TestCheckWritesOnlyItsTempFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the CLI is linked only under a uid switch, which needs root")
	}
	root, exe, workspace := checkRig(t)
	bin, marker := privateCLI(t, root)
	before := dirNames(t, root)
	links := dirNames(t, isolate.DefaultCLILinks)
	t.Cleanup(func() { // what a failing check left there
		for _, n := range dirNames(t, isolate.DefaultCLILinks) {
			if !slices.Contains(links, n) && linksTo(filepath.Join(isolate.DefaultCLILinks, n), marker) {
				os.RemoveAll(filepath.Join(isolate.DefaultCLILinks, n))
			}
		}
	})
	listen, metrics := checkAddrs(t)
	code, stdout, stderr := cliRun(t, exe, nil, "serve", "--check", "--homes", filepath.Join(root, "homes"),
		"--workspace", workspace, "--codex", bin, "--listen", listen, "--metrics-listen", metrics)
	if code != 0 || !strings.Contains(stdout, "the settings are valid") {
		t.Fatalf("serve --check: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, w := range []string{"the probe ran it from " + filepath.Join(root, isolate.ProbePrefix), "links in its temporary folder (removed)",
		"serve makes them once per CLI build under " + isolate.DefaultCLILinks, "wrote nothing but its probe's temporary folder"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("serve --check: stdout %q lacks %q", stdout, w)
		}
	}
	if after := dirNames(t, root); !slices.Equal(after, before) {
		t.Errorf("serve --check left %v beside the homes, had %v", after, before)
	}
	for _, n := range dirNames(t, isolate.DefaultCLILinks) {
		if !slices.Contains(links, n) && linksTo(filepath.Join(isolate.DefaultCLILinks, n), marker) {
			t.Errorf("serve --check linked the CLI into %s", filepath.Join(isolate.DefaultCLILinks, n))
		}
	}
}

// privateCLI is the real CLI's folder hard-linked under a 0700 folder of
// root, where no user uid can follow: its binary's path, and a marker file
// of its own in the folder. A copy of the folder (isolate.LinkCLI's) holds
// a link of the marker; the CLI's own files are links of the installed
// CLI's, which other daemons on this host link too.
func privateCLI(t *testing.T, root string) (bin, marker string) {
	t.Helper()
	src := filepath.Dir(filepath.Dir(opsCodexBin(t))) // the vendor folder holding bin/
	dst := filepath.Join(root, "private-cli")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", src, filepath.Join(dst, "cli")).CombinedOutput(); err != nil {
		t.Fatalf("linking the CLI: %v: %s", err, out)
	}
	marker = filepath.Join(dst, "cli", "marker-"+filepath.Base(root))
	if err := os.WriteFile(marker, []byte(t.Name()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dst, "cli", "bin", filepath.Base(opsCodexBin(t))), marker
}

// dirNames is dir's entries (none when it does not exist).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// linksTo reports whether the tree at dir holds a link of file.
func linksTo(dir, file string) bool {
	want, err := os.Stat(file)
	if err != nil {
		return false
	}
	found := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := os.Stat(p); err == nil && os.SameFile(fi, want) {
				found = true
			}
		}
		return nil
	})
	return found
}

// TestCheckBeforeARestart: the check a restart is preceded by (the
// unit's "same line plus --check") runs while the daemon still serves:
// an address in use while these homes' lock is held is that daemon's, a
// warning naming its pid, and the check passes; the same address in use
// with no daemon on the homes is a problem.
func TestCheckBeforeARestart(t *testing.T) {
	root, exe, workspace := checkRig(t)
	homes := filepath.Join(root, "homes")
	listen, _ := checkAddrs(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	check := []string{"serve", "--check", "--homes", homes, "--workspace", workspace, "--codex", opsCodexBin(t),
		"--listen", listen, "--metrics-listen", held.Addr().String()}

	code, _, stderr := cliRun(t, exe, nil, check...)
	if code != 2 || !strings.Contains(stderr, "--metrics-listen "+held.Addr().String()+" cannot be bound") {
		t.Errorf("serve --check, the port held, no daemon: exit %d, stderr %q; want 2 naming it", code, stderr)
	}

	lock, err := lockMemberHomes(homes, "") // the serving daemon's
	if err != nil {
		t.Fatal(err)
	}
	defer lock.release()
	code, stdout, stderr := cliRun(t, exe, nil, check...)
	want := fmt.Sprintf("warning: --metrics-listen %s is in use, by the daemon serving these homes (pid %d)", held.Addr(), os.Getpid())
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("serve --check while the daemon serves: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
}
