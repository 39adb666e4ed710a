package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/meshweaver/supervisor/isolate"
)

// isolationOptions are the serve flags that say how users are kept apart
// (package isolate; docs/SECURITY.md, "Between users").
type isolationOptions struct {
	uidRange          string
	bwrap             string
	allowShared       bool
	workspaceWritable bool
	readOnly          stringList
}

func (o *isolationOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.uidRange, "uid-range", "200000-299999", "`LO-HI`: uids the users' app-servers run as, one per user, when the daemon may switch uids (root); off: never switch")
	fs.StringVar(&o.bwrap, "bwrap", "auto", "bubblewrap `PATH` that gives each app-server a private view of the files and processes; auto: bwrap from PATH when it works; off: none")
	fs.BoolVar(&o.allowShared, "allow-shared-uid", false, "serve more than one user even when neither a uid switch nor bubblewrap separates them")
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
		UIDs: uids, Bwrap: host.Bwrap, ReadOnly: ro, Hide: hide, AllowShared: o.allowShared,
		Root: os.Geteuid() == 0,
	})
	if err != nil {
		return nil, err
	}
	if w := n.Warning(); w != "" {
		log.Warn(w, "isolation", n.Mode())
	} else {
		log.Info("users separated", "isolation", n.Mode(), "uid_range", uids.String(), "bwrap", host.Bwrap)
	}
	return n, nil
}
