package isolate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// systemDirs are bound read-only (or recreated as the host's symlinks):
// the programs and libraries a CLI and its shell commands need.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the parts of /etc a CLI, a shell and TLS need; the rest of
// /etc (the daemon's configuration, its TLS keys) stays out.
var etcFiles = []string{
	"/etc/alternatives", "/etc/bash.bashrc", "/etc/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/environment", "/etc/gai.conf", "/etc/group", "/etc/host.conf", "/etc/hostname", "/etc/hosts",
	"/etc/inputrc", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
	"/etc/login.defs", "/etc/mime.types", "/etc/nsswitch.conf", "/etc/os-release", "/etc/passwd",
	"/etc/pki", "/etc/profile", "/etc/profile.d", "/etc/resolv.conf", "/etc/services", "/etc/shells",
	"/etc/ssl", "/etc/terminfo", "/etc/timezone", "/etc/gitconfig",
}

// bwrapArgs is the bubblewrap command line for home's app-server: new
// pid, IPC, UTS and cgroup namespaces with a fresh /proc (no other user's
// process is visible or reachable), the system read-only, an empty /tmp,
// and of the homes root only this home; the workspace and the CLI's
// folder bound; the daemon's hidden files masked. --die-with-parent ends
// the sandbox when bubblewrap's parent (the daemon) dies, --new-session
// keeps it off the daemon's terminal. Nothing of the daemon's environment
// is added: the environment is the one the caller gives bubblewrap.
func (n *Node) bwrapArgs(home, codexBin string) []string {
	a := []string{n.opts.Bwrap,
		"--die-with-parent", "--new-session",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
	}
	if n.opts.Root && n.opts.UIDs.Empty() {
		// Root's capabilities stay in the sandbox's own user namespace,
		// where they reach nothing of the host (open_by_handle_at, mknod,
		// the host's network settings all need them in the initial one).
		a = append(a, "--unshare-user")
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, f := range etcFiles {
		a = append(a, "--ro-bind-try", f, f)
	}
	if ws := n.opts.Workspace; ws != "" {
		if n.opts.WorkspaceWritable {
			a = append(a, "--bind", ws, ws)
		} else {
			a = append(a, "--ro-bind", ws, ws)
		}
	}
	if codexBin != "" {
		dir := cliFolder(codexBin)
		a = append(a, "--ro-bind", dir, dir)
	}
	for _, p := range n.opts.ReadOnly {
		a = append(a, "--ro-bind", p, p)
	}
	// The homes root after every other bind: a workspace, codex folder or
	// read-only path that contains it (or lies under it) must not bring
	// the other homes back in; then this home alone.
	a = append(a, "--tmpfs", n.opts.Homes, "--bind", home, home)
	for _, p := range n.opts.Hide {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			a = append(a, "--tmpfs", p)
		default:
			a = append(a, "--ro-bind", "/dev/null", p)
		}
	}
	if ws := n.opts.Workspace; ws != "" {
		a = append(a, "--chdir", ws)
	}
	return append(a, "--")
}

// Host is what this machine lets the daemon use to separate users.
type Host struct {
	// SetUID: the daemon may switch uids and give files away (root, or
	// CAP_SETUID, CAP_SETGID and CAP_CHOWN).
	SetUID bool
	// Bwrap is the bubblewrap binary that ran a probe sandbox; "" if none.
	Bwrap string
	// BwrapErr says why bubblewrap is not usable, when it was looked for.
	BwrapErr error
}

// Detect finds what separates users here. bwrap is "auto" (bubblewrap from
// PATH when it works), "off", or a path (which must work). The probe runs
// bubblewrap the way app-servers will: under probeUID when the daemon can
// switch to it (bubblewrap then makes a user namespace), so a kernel that
// forbids unprivileged user namespaces shows here, at start.
func Detect(bwrap string, uids Range) Host {
	h := Host{SetUID: canSetUID()}
	if bwrap == "off" {
		return h
	}
	path := bwrap
	if bwrap == "auto" || bwrap == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			h.BwrapErr = fmt.Errorf("bubblewrap not found: %w", err)
			return h
		}
		path = p
	}
	var cred *syscall.Credential
	if h.SetUID && !uids.Empty() {
		cred = &syscall.Credential{Uid: uids.Hi, Gid: uids.Hi, Groups: []uint32{}}
	}
	if err := probe(path, cred); err != nil {
		h.BwrapErr = err
		return h
	}
	h.Bwrap = path
	return h
}

// probe runs a minimal sandbox like the app-servers' (pid namespace,
// fresh /proc) and reports whether it worked.
func probe(bwrap string, cred *syscall.Credential) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/",
		"--proc", "/proc", "--dev", "/dev", "--", "/bin/true")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bubblewrap %s does not work here: %v: %.200s", bwrap, err, out)
	}
	return nil
}

// canSetUID reports whether this process may switch to other uids and
// chown files to them.
func canSetUID() bool {
	if os.Geteuid() == 0 {
		return true
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return has(unix.CAP_SETUID) && has(unix.CAP_SETGID) && has(unix.CAP_CHOWN)
}
