package isolate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meshweaver/supervisor/isolate"
)

// TestUnreachable names the first folder a user's uid cannot search.
func TestUnreachable(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	open := filepath.Join(root, "open", "deeper")
	private := filepath.Join(root, "private", "deeper")
	for _, d := range []string{open, private} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		open:                           "",
		private:                        filepath.Join(root, "private"),
		filepath.Join(root, "private"): filepath.Join(root, "private"),
	} {
		got, err := isolate.Unreachable(path)
		if err != nil || got != want {
			t.Errorf("Unreachable(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
}

// TestCLIUnderAPrivateFolder: a CLI installed under a folder only root
// may search (a project cloned into root's home or a mktemp -d) runs for a
// user's uid inside its sandbox: the node links its folder, helpers and
// all, into its own CLI folder once, and every user runs it from there. A
// CLI the users can reach stays where it is.
func TestCLIUnderAPrivateFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the uid switch needs root; CI runs as root")
	}
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("no bubblewrap")
	}
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	private := filepath.Join(root, "clone") // 0700, like a mktemp -d
	vendor := filepath.Join(private, "node_modules", "vendor")
	for _, d := range []string{filepath.Join(vendor, "bin"), filepath.Join(vendor, "path")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	// The stand-in CLI runs its helper from beside bin/, as codex runs rg.
	if err := os.WriteFile(filepath.Join(vendor, "path", "helper"), []byte("#!/bin/sh\necho helper-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(vendor, "bin", "codex")
	script := "#!/bin/sh\necho \"uid=$(id -u)\"; exec \"$(dirname \"$0\")/../path/helper\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	links := filepath.Join(root, "cli")
	n, err := isolate.New(isolate.Options{Homes: filepath.Join(root, "homes"), UIDs: isolate.Range{Lo: 221000, Hi: 221999},
		Bwrap: "/usr/bin/bwrap", CLILinks: links})
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for _, user := range []string{"alice", "bob"} {
		l, err := n.Prepare(filepath.Join(root, "homes", user, ".codex"), bin)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(l.Binary, links+"/") {
			t.Fatalf("%s runs the CLI at %s, want a link under %s", user, l.Binary, links)
		}
		if first == "" {
			first = l.Binary
		} else if l.Binary != first {
			t.Fatalf("bob's CLI %s, alice's %s: want one link", l.Binary, first)
		}
		cmd := exec.Command(l.Wrapper[0], append(l.Wrapper[1:], l.Binary)...)
		cmd.Dir = "/"
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, l.Env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.Credential}
		out, err := cmd.CombinedOutput()
		want := "uid=" + strconv.Itoa(int(l.Credential.Uid)) + "\nhelper-ran\n"
		if err != nil || string(out) != want {
			t.Fatalf("%s's CLI in its sandbox: %v, %q; want %q", user, err, out, want)
		}
	}
	// The linked files are the CLI's own (hard links), and nobody but the
	// daemon may change the folder.
	a, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) {
		t.Error("the linked CLI is not the installed file")
	}
	if fi, err := os.Stat(links); err != nil || fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("the CLI links folder: %v, %v", fi.Mode(), err)
	}

	// A CLI the users can reach is run where it is.
	if err := os.Chmod(private, 0o755); err != nil {
		t.Fatal(err)
	}
	n2, err := isolate.New(isolate.Options{Homes: filepath.Join(root, "homes2"), UIDs: isolate.Range{Lo: 222000, Hi: 222999},
		Bwrap: "/usr/bin/bwrap", CLILinks: links})
	if err != nil {
		t.Fatal(err)
	}
	l, err := n2.Prepare(filepath.Join(root, "homes2", "carol", ".codex"), bin)
	if err != nil || l.Binary != bin {
		t.Fatalf("a reachable CLI: %s, %v; want %s", l.Binary, err, bin)
	}
}
