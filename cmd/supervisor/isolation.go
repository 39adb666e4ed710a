package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshweaver/supervisor/isolate"
)

// isolationOptions are the serve flags that say how users are kept apart
// (package isolate; docs/SECURITY.md, "Between users").
type isolationOptions struct {
	uidRange          string
	bwrap             string
	allowShared       bool
	allowUIDOnly      bool
	uidClaims         string
	workspaceWritable bool
	readOnly          stringList
	// cliLinks is where the CLI is linked when the users' uids cannot
	// reach it (not a flag; serve --check's probe: a temporary folder);
	// "" is isolate.DefaultCLILinks.
	cliLinks string
}

func (o *isolationOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.uidRange, "uid-range", "200000-299999", "`LO-HI`: uids the users' app-servers run as, one per user, when the daemon may switch uids (root); off: never switch")
	fs.StringVar(&o.bwrap, "bwrap", "auto", "bubblewrap `PATH` that gives each app-server a private view of the files and processes; auto: bwrap from PATH when it works; off: none")
	fs.BoolVar(&o.allowShared, "allow-shared-uid", false, "serve more than one user even when neither a uid switch nor bubblewrap separates them")
	fs.BoolVar(&o.allowUIDOnly, "allow-uid-only", false, "serve with uid switching but without bubblewrap (uid-only): every user's agent then shares /tmp, /dev/shm and every world-readable file of the host with the others; refused by default")
	fs.StringVar(&o.uidClaims, "uid-claims", isolate.DefaultHostClaims, "`DIR` every daemon of this host claims its users' uids in, so that two daemons never give one uid to two homes (off: none; then run one daemon per host or give each its own --uid-range)")
	fs.BoolVar(&o.workspaceWritable, "workspace-writable", false, "bind the workspace read-write into the users' sandboxes (default read-only)")
	fs.Var(&o.readOnly, "sandbox-ro", "`PATH` bound read-only into every user's sandbox, such as a model catalog (repeatable)")
}

func (o *isolationOptions) validate() error {
	_, err := isolate.ParseRange(o.uidRange)
	if err != nil {
		return fmt.Errorf("--uid-range: %w", err)
	}
	return nil
}

// switchesUIDs reports whether the daemon will run each user's
// app-server under a uid of its own here.
func (o *isolationOptions) switchesUIDs() bool {
	uids, err := isolate.ParseRange(o.uidRange)
	return err == nil && !uids.Empty() && isolate.Detect("off", uids).SetUID
}

// unreachable names each path a round needs that the users' uids cannot
// reach (the homes, the workspace, the --sandbox-ro paths), with the fix:
// bubblewrap binds them as the user's uid, and the CLI reading the
// workspace is that uid. The CLI itself is linked where they can reach it
// (isolate.Options.CLILinks). The homes folder itself is not held against
// them: serve opens it (isolate.Node.OpenHomes) before any round, and
// creates the folders missing above it passable (isolate.MakeHomes); a
// path not made yet is judged by the deepest part of it that exists.
func (o *isolationOptions) unreachable(homes, workspace string) []error {
	var errs []error
	openedHomes, _ := filepath.Abs(homes)
	for _, p := range append([]string{homes, workspace}, o.readOnly...) {
		if p == "" {
			continue
		}
		blocked, err := isolate.Unreachable(p)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		case blocked != "" && p == homes && blocked == openedHomes:
			// Opened at start, as a user's first start would.
		case blocked != "":
			mode := "?"
			if fi, err := os.Stat(blocked); err == nil {
				mode = fmt.Sprintf("%04o", fi.Mode().Perm())
			}
			errs = append(errs, fmt.Errorf("%s is out of the users' reach: %s (mode %s) does not let their uids through; every round would fail. Let them through (chmod o+x %s) or move %s",
				p, blocked, mode, blocked, p))
		}
	}
	return errs
}

// node detects what this host allows and builds the users' separation
// from it; it fails only on an explicit --bwrap that does not work.
func (o *isolationOptions) node(homes, workspace string, hide []string, log *slog.Logger) (*isolate.Node, error) {
	uids, err := isolate.ParseRange(o.uidRange)
	if err != nil {
		return nil, err
	}
	host := isolate.Detect(o.bwrap, uids)
	if !host.SetUID && !uids.Empty() {
		log.Info("not switching uids: the daemon may not (run it as root, or with CAP_SETUID, CAP_SETGID and CAP_CHOWN)")
		uids = isolate.Range{}
	}
	if !uids.Empty() && host.Bwrap == "" && !o.allowUIDOnly {
		why := "bubblewrap is off"
		if host.BwrapErr != nil {
			why = host.BwrapErr.Error()
		}
		return nil, fmt.Errorf("the users' app-servers would run under uids of their own but without bubblewrap (%s): every user's agent would share /tmp, /dev/shm and every world-readable file with the others. Install bubblewrap (Debian: apt-get install bubblewrap), or accept that with --allow-uid-only", why)
	}
	claims := o.uidClaims
	if claims == "off" {
		claims = ""
	}
	if host.BwrapErr != nil {
		if o.bwrap != "auto" {
			return nil, fmt.Errorf("--bwrap %s: %w", o.bwrap, host.BwrapErr)
		}
		log.Warn("no bubblewrap sandbox for app-servers", "err", host.BwrapErr)
	}
	var ro []string
	for _, p := range o.readOnly {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		ro = append(ro, abs)
	}
	n, err := isolate.New(isolate.Options{
		Homes: homes, Workspace: workspace, WorkspaceWritable: o.workspaceWritable,
		UIDs: uids, Bwrap: host.Bwrap, ReadOnly: ro, Hide: hide, AllowShared: o.allowShared, HostClaims: claims,
		Root: os.Geteuid() == 0, CLILinks: o.cliLinks,
	})
	if err != nil {
		return nil, err
	}
	if n.Mode() == "uid" {
		log.Warn("uid-only: no bubblewrap, so the users' agents share /tmp, /dev/shm and every world-readable file of the host (--allow-uid-only)", "isolation", n.Mode())
	} else if w := n.Warning(); w != "" {
		log.Warn(w, "isolation", n.Mode())
	} else {
		log.Info("users separated", "isolation", n.Mode(), "uid_range", uids.String(), "bwrap", host.Bwrap)
	}
	return n, nil
}

// openUp opens the homes for the users' uids (isolate.Node.OpenHomes) and
// only then checks that every path a round needs is within their reach
// (unreachable), logging each that is not. It returns the readiness
// condition: "" while every path is within reach, else why every round
// fails. The condition checks again at each call (a few stats), so that a
// mode the operator fixes while the daemon serves makes it ready.
func (o *isolationOptions) openUp(n *isolate.Node, homes, workspace string, log *slog.Logger) (func() string, error) {
	if n.UIDs().Empty() {
		return func() string { return "" }, nil
	}
	if err := n.OpenHomes(); err != nil {
		return nil, err
	}
	for _, err := range o.unreachable(homes, workspace) {
		log.Error("a path the users' app-servers need is out of their reach", "err", err)
	}
	return func() string {
		var why []string
		for _, err := range o.unreachable(homes, workspace) {
			why = append(why, err.Error())
		}
		return strings.Join(why, "; ")
	}, nil
}
